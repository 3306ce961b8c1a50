"""Prefix caching inside the engine (issue 15): hand-worked runs, the pool's invariants on random
traces with shared prefixes, and an independent count of the hits an unbounded cache must find.

Conventions checked here (``allocator.memory.allocators.PagedAllocator``): only full prompt blocks are
keyed, a key covers its block and every token before it, the block holding the prompt's last
token is always computed, a finished sequence's keyed blocks stay findable until the free queue
hands them out again (an eviction), and the hit rate counts each prompt once, at its first
admission.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.memory.paged import PagedAllocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.common.mathutils import cdiv
from allocator.viz.maps import MAP_BLOCK_CACHED, MAP_BLOCK_FREE, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED, block_picture
from allocator.engine.scenario import run_both
from allocator.workloads.requests import Request, Workload
from tests.tools.engine_digest import picture_as_tuples


class Prompts:
    """Prompt token ids by request id (what ``Workload.prompts`` must offer)."""

    def __init__(self, by_id: dict):
        self.by_id = {k: np.asarray(v, dtype=np.int64) for k, v in by_id.items()}

    def __contains__(self, request_id) -> bool:
        return request_id in self.by_id

    def tokens(self, request_id):
        return self.by_id[request_id]


A = list(range(1, 11))                          # 10 tokens: two full blocks of 4 and a partial one
HAND = {1: A, 2: list(range(100, 109)), 3: A[:8] + [99, 98, 97]}
HAND_REQS = [Request(1, 10, 2, 0), Request(2, 9, 2, 5), Request(3, 11, 2, 10)]


def _hand(slots: int, caching: bool = True, reqs=HAND_REQS, prompts=HAND):
    wl = Workload("hand", reqs, 16, prompts=Prompts(prompts))
    return simulate(wl, PagedAllocator(slots, 4, prefix_caching=caching), check_invariants=True)


def test_a_finished_prompt_is_found_by_a_later_request_and_skips_its_prefill():
    r = _hand(64)                               # 16 blocks: nothing is ever evicted
    m = r.metrics
    assert m["step"].tolist() == [0, 1, 2, 5, 6, 7, 10, 11]
    # request 3 shares request 1's first 8 tokens (two full blocks of 4): found, not prefilled
    assert m["prefix_hit_tokens"].tolist() == [0, 0, 0, 0, 0, 0, 8, 0]
    assert m["prompt_tokens_admitted"].tolist() == [10, 0, 0, 9, 0, 0, 11, 0]
    assert m["prefill_tokens"].tolist() == [10, 0, 0, 9, 0, 0, 3, 0]
    # request 1 leaves its two full prompt blocks cached (its partial third block is not keyed);
    # request 2 adds its two; request 3 takes request 1's two out of the cache while it runs
    assert m["cached_blocks"].tolist() == [0, 2, 2, 2, 4, 4, 2, 4]
    assert m["cached_evictions"].sum() == 0
    s = r.summary
    assert (s["prefill_tokens_saved"], s["prompt_tokens_admitted"], s["cached_block_evictions"]) == (8, 30, 0)
    assert s["prefix_cache_hit_rate"] == round(8 / 30, 6) and s["peak_cached_blocks"] == 4


def test_without_caching_nothing_is_found_and_the_summary_has_no_cache_figures():
    r = _hand(64, caching=False)
    assert r.metrics["prefix_hit_tokens"].sum() == 0 and r.metrics["prefill_tokens"].sum() == 30
    assert r.metrics["cached_blocks"].sum() == 0
    assert "prefix_cache_hit_rate" not in r.summary and not r.prefix_caching


def test_a_small_pool_evicts_cached_blocks_least_recently_used_first():
    r = _hand(16)                               # 4 blocks
    m = r.metrics
    # request 2 needs 3 blocks: the free queue gives block 3 (never used), block 2 (request 1's
    # unkeyed partial block) and block 1 (request 1's second keyed block: an eviction)
    assert m["cached_evictions"].tolist() == [0, 0, 0, 1, 0, 0, 1, 1]
    # so request 3 finds only the first block of its prefix: 4 tokens, and prefills 7
    assert m["prefix_hit_tokens"].tolist() == [0, 0, 0, 0, 0, 0, 4, 0]
    assert m["prefill_tokens"].tolist() == [10, 0, 0, 9, 0, 0, 7, 0]
    assert r.summary["cached_block_evictions"] == 3 and r.summary["prefix_cache_hit_rate"] == round(4 / 30, 6)


def test_the_block_holding_the_last_prompt_token_is_always_computed():
    # request 2's whole prompt is request 1's first two blocks: only the first is reused, because
    # the second holds the prompt's last token, whose logits start the output
    reqs = [Request(1, 10, 2, 0), Request(2, 8, 2, 5)]
    r = _hand(64, reqs=reqs, prompts={1: A, 2: A[:8]})
    assert r.metrics["prefix_hit_tokens"].tolist()[-2:] == [4, 0]
    assert r.summary["prefill_tokens_saved"] == 4


def test_running_sequences_share_cached_blocks_and_the_map_colours_them():
    reqs = [Request(1, 10, 2, 0), Request(3, 11, 3, 10), Request(4, 9, 3, 10)]
    prompts = {1: A, 3: A[:8] + [99, 98, 97], 4: A[:8] + [7]}
    r = _hand(64, reqs=reqs, prompts=prompts)
    m = r.metrics
    i = m["step"].tolist().index(10)
    # request 3 takes blocks 0 and 1 back from the cache; request 4 then points at them too
    assert m["prefix_hit_tokens"][i] == 16 and m["prefill_tokens"][i] == (11 - 8) + (9 - 8)
    # the shared blocks hold 8 tokens once: used = logical - 8
    assert m["logical_tokens"][i] == 12 + 10 and m["used_slots"][i] == 22 - 8
    snap = r.snapshots[10]
    tables = {sid: table for sid, _, table in snap}
    assert tables[3][:2] == tables[4][:2] == (0, 1)
    state, owner, refs = block_picture(snap, 16)
    assert state[0] == state[1] == MAP_BLOCK_SHARED and refs[0] == 2 and owner[0] == 3
    assert {int(state[b]) for b in tables[3][2:] + tables[4][2:]} == {MAP_BLOCK_PRIVATE}
    assert state[2] == MAP_BLOCK_FREE              # request 1's unkeyed partial block is plain free
    # when nothing runs, the keyed blocks are held only by the cache: an id-0 entry, least recently
    # used first, in the idle gap's picture too (requests 3 and 4 keyed no new block: their full
    # prompt blocks were the cached ones)
    assert picture_as_tuples(r.snapshots[1]) == picture_as_tuples(r.snapshots[2]) == ((0, 0, (1, 0)),)
    last = r.snapshots[max(r.snapshots)]
    assert picture_as_tuples(last) == ((0, 0, (1, 0)),) and r.metrics["cached_blocks"][-1] == 2
    assert last[0][2].dtype == np.int64 and not last[0][2].flags.writeable     # the cache's entry: an array
    state, _, _ = block_picture(last, 16)
    assert np.flatnonzero(state == MAP_BLOCK_CACHED).tolist() == [0, 1]
    assert (state[2:] == MAP_BLOCK_FREE).all()


def test_reservations_never_share_and_run_both_passes_caching_to_the_paged_side():
    wl = Workload("hand", HAND_REQS, 4, prompts=Prompts(HAND))
    res = run_both(wl, 64, 4, prefix_caching=True)
    assert res["paged"].summary["prefill_tokens_saved"] == 8
    assert "prefix_cache_hit_rate" not in res["reserve_max"].summary
    assert res["reserve_max"].metrics["prefill_tokens"].sum() == 30
    assert ReserveMaxAllocator(64, 4).prefix_caching is False


def test_a_re_admission_after_recompute_is_not_counted_twice():
    # a 4-block pool: request 1 grows into request 2's way and request 2 is preempted (recompute),
    # then admitted again; its prompt counts once in the denominator
    reqs = [Request(1, 3, 10, 0), Request(2, 7, 2, 1)]
    r = _hand(16, reqs=reqs, prompts={1: [1, 2, 3], 2: [1, 2, 3, 4, 5, 6, 7]})
    assert r.summary["preemptions"] >= 1
    assert r.summary["prompt_tokens_admitted"] == 3 + 7
    assert r.metrics["admitted"].sum() == 2 + r.summary["preemptions"]


# ---- random traces with shared prefixes ------------------------------------------------------

@st.composite
def traces(draw):
    """2-9 requests whose prompts start with a random part of one of a few random 'documents'."""
    block = draw(st.sampled_from([1, 2, 3, 4, 8]))
    docs = [draw(st.lists(st.integers(0, 5), min_size=1, max_size=24)) for _ in range(draw(st.integers(1, 3)))]
    n = draw(st.integers(2, 9))
    prompts, reqs = {}, []
    for rid in range(1, n + 1):
        doc = docs[draw(st.integers(0, len(docs) - 1))]
        head = doc[:draw(st.integers(0, len(doc)))]
        tail = draw(st.lists(st.integers(0, 5), max_size=6))
        prompt = head + tail or [0]
        prompts[rid] = prompt
        reqs.append(Request(rid, len(prompt), draw(st.integers(1, 8)), draw(st.integers(0, 12))))
    return block, reqs, prompts


def _reference_hits(block: int, reqs, prompts) -> int:
    """Hit tokens an unbounded cache must find, counted without the engine: requests in FCFS
    order; each reuses its longest run of leading full blocks equal (with everything before them)
    to an earlier request's full prompt blocks, short of the block holding its last token."""
    seen: set = set()
    hits = 0
    for r in sorted(reqs, key=lambda r: (r.arrival_step, r.id)):
        p = tuple(prompts[r.id])
        limit = (len(p) - 1) // block
        k = 0
        while k < limit and p[:(k + 1) * block] in seen:
            k += 1
        hits += k * block
        seen.update(p[:(i + 1) * block] for i in range(len(p) // block))
    return hits


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.integers(0, 60), st.sampled_from(["recompute", "swap"]))
def test_random_traces_keep_every_refcount_and_the_pool_identity(trace, extra_blocks, preemption):
    """check_invariants runs after every step: free + cached + in use == total, each refcount ==
    the block tables listing it, hashes consistent, shared saving exact."""
    block, reqs, prompts = trace
    wl = Workload("random", reqs, 8, prompts=Prompts(prompts))
    need = max(cdiv(r.prompt_len + r.output_len, block) for r in reqs)
    alloc = PagedAllocator((need + extra_blocks) * block, block, preemption=preemption, prefix_caching=True)
    r = simulate(wl, alloc, check_invariants=True)
    s = r.summary
    assert not s["rejected"] and s["finished"] == len(reqs)
    assert s["prompt_tokens_admitted"] == sum(q.prompt_len for q in reqs)      # each prompt once
    assert 0 <= s["prefill_tokens_saved"] <= s["prompt_tokens_admitted"]
    assert (r.metrics["cached_blocks"] <= alloc.num_blocks).all()
    if not s["preemptions"]:                   # every token is prefilled once unless found cached
        assert r.metrics["prefill_tokens"].sum() == s["prompt_tokens_admitted"] - s["prefill_tokens_saved"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_an_unbounded_pool_finds_exactly_the_independently_counted_hits(trace):
    block, reqs, prompts = trace
    wl = Workload("random", reqs, 8, prompts=Prompts(prompts))
    blocks = sum(cdiv(r.prompt_len + r.output_len, block) for r in reqs)     # never evicts
    r = simulate(wl, PagedAllocator(blocks * block, block, prefix_caching=True), check_invariants=True)
    assert r.summary["preemptions"] == 0 and r.summary["cached_block_evictions"] == 0
    assert r.summary["prefill_tokens_saved"] == _reference_hits(block, reqs, prompts)


def test_the_reference_count_itself_on_the_hand_trace():
    assert _reference_hits(4, HAND_REQS, HAND) == 8
    assert _reference_hits(4, [Request(1, 10, 2, 0), Request(2, 8, 2, 5)], {1: A, 2: A[:8]}) == 4


@pytest.mark.parametrize("bad", [0, -1, 2 ** 26 + 1])
def test_a_bad_pool_for_a_trace_replay_is_named(bad):
    """The one pool range (allocator.common.limits): at most 2**30 slots, so 2**26 blocks of 16."""
    from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
    from allocator.studies.prefix_cache import run
    from allocator.common.errors import FieldError

    wl = mooncake_workload(shipped_mooncake(), count=3)
    with pytest.raises(FieldError, match="pool_blocks") as err:
        run(wl, 16, bad)
    assert "from 1 to 67,108,864 (blocks of 16 slots" in str(err.value)


def test_a_pool_of_2_to_the_30_slots_costs_what_it_holds():
    """The largest pool of the range replays a trace window, and its memory follows the blocks
    used, not the pool's 2**26 blocks (a per-block list of that many entries alone is 512 MiB)."""
    import tracemalloc

    from allocator.workloads.mooncake import mooncake_workload, shipped_mooncake
    from allocator.studies.prefix_cache import run

    wl = mooncake_workload(shipped_mooncake(), count=20)
    small = run(wl, 16, 2 ** 16).summary
    tracemalloc.start()
    big = run(wl, 16, 2 ** 26).summary
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert big["total_slots"] == 2 ** 30 and big["cached_block_evictions"] == 0
    assert big["prefill_tokens_saved"] == small["prefill_tokens_saved"] > 0
    assert peak < 64 * 2 ** 20
