"""Prefix sharing and swap in the step engine (the explainer's paged side).

assets/reference_figures.md R3: lengths 20 and 23 sharing an 8-token prefix in blocks of 4 take
44 slots separately, 36 shared, and hold 43 logical tokens — three quantities kept apart.
"""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.viz.maps import DUPLICATE, EMPTY, HOLE, SHARED, TOKEN
from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Request, Workload
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator.__main__ import main
from allocator.accounting.sharing import prefix_sharing
from allocator.viz.maps import slot_states
from allocator.workloads.requests import classroom_40, with_shared_prefix


def r3_pair():
    # prompts of 19 and 22 tokens (the first 8 shared); prefill emits one token each -> 20 and 23 held
    return Workload("pair", (Request(1, 19, 2), Request(2, 22, 2)), max_new_tokens=2, shared_prefix=8)


def test_engine_agrees_with_the_accounting_of_r3():
    res = simulate(r3_pair(), PagedAllocator(64, 4), check_invariants=True)
    m = res.metrics
    acc = prefix_sharing(20, 23, 8, 4)
    assert (acc.logical_tokens, acc.slots_unshared, acc.slots_shared) == (43, 44, 36)
    assert m["logical_tokens"][0] == acc.logical_tokens
    assert m["allocated_unshared"][0] == acc.slots_unshared
    assert m["allocated_slots"][0] == acc.slots_shared
    assert m["used_slots"][0] == 43 - 8                     # the 8 shared tokens are stored once
    owner, state = slot_states(res, 0)
    assert (state == SHARED).sum() == 8 and (state == TOKEN).sum() == 27


def test_only_full_prefix_blocks_are_shared():
    # a 10-token prefix at block 4: two full blocks (8 tokens) shared, the partial third is private
    w = Workload("pair", (Request(1, 19, 2), Request(2, 22, 2)), max_new_tokens=2, shared_prefix=10)
    res = simulate(w, PagedAllocator(64, 4), check_invariants=True)
    assert res.metrics["allocated_slots"][0] == 44 - 8


def test_reserve_max_cannot_share():
    """Each reservation stores its own copy of the prompt: 43 tokens in the pool, of which 35 are
    distinct; the second copy of the 8-token prefix is duplicate, counted as waste, not utilisation."""
    res = simulate(r3_pair(), ReserveMaxAllocator(64, 2), check_invariants=True)
    m = res.metrics
    assert m["logical_tokens"][0] == 43 and m["used_slots"][0] == 35 and m["duplicate_slots"][0] == 8
    assert m["allocated_slots"][0] == (19 + 2) + (22 + 2)
    assert m["internal_fragmentation"][0] + m["reserved_slots"][0] == m["allocated_slots"][0] - 43
    owner, state = slot_states(res, 0)
    assert (state == DUPLICATE).sum() == 8 and (state == TOKEN).sum() == 35


def test_a_shared_prompt_no_longer_flatters_reserve_max():
    """Finding 4 of the lesson-truth issue: with copies counted as useful, adding a 256-token system
    prompt raised reserve-max's utilisation from 31 % to 46 %. Counted once, duplicates are waste."""
    w = classroom_40()
    plain = simulate(w, ReserveMaxAllocator(2048, 600), record_snapshots=False).summary
    shared = simulate(with_shared_prefix(w, 256), ReserveMaxAllocator(2048, 600), record_snapshots=False).summary
    assert shared["peak_running"] < plain["peak_running"]
    assert shared["mean_duplicate_fraction_busy"] > 0.05 and plain["mean_duplicate_fraction_busy"] == 0
    assert shared["mean_utilization_busy"] < 0.40          # was 0.46 when every copy counted
    paged = simulate(with_shared_prefix(w, 256), PagedAllocator(2048, 16), record_snapshots=False).summary
    assert paged["mean_duplicate_fraction_busy"] == 0      # 256 = 16 full blocks: stored once


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10), prefix=st.integers(0, 40), block=st.integers(1, 16), total=st.integers(150, 900),
       data=st.data())
def test_the_map_draws_exactly_what_the_metrics_count(n, prefix, block, total, data):
    """At every step, for both allocators: duplicate cells = duplicate_slots, token cells (shared
    counted once per slot) = distinct tokens, allocated-empty cells = internal fragmentation."""
    reqs = tuple(Request(i + 1, prefix + data.draw(st.integers(1, 30)), data.draw(st.integers(1, 30)),
                         data.draw(st.integers(0, 8))) for i in range(n))
    w = Workload("random", reqs, max_new_tokens=30, shared_prefix=prefix)
    for alloc in (ReserveMaxAllocator(total, 30), PagedAllocator(total, block)):
        res = simulate(w, alloc)
        m = res.metrics
        for r in range(res.records):
            owner, state = slot_states(res, int(m["step"][r]))
            assert (state == DUPLICATE).sum() == m["duplicate_slots"][r]
            assert (state == TOKEN).sum() + (state == SHARED).sum() == m["used_slots"][r]
            assert (state == EMPTY).sum() == m["internal_fragmentation"][r] + m["reserved_slots"][r]
            assert (state == HOLE).sum() == m["external_fragmentation"][r]


def test_shared_prefix_fits_more_of_classroom_40():
    w = with_shared_prefix(classroom_40(), 256)
    assert all(r.prompt_len >= 256 + 32 for r in w.requests) and w.shared_prefix == 256
    shared = simulate(w, PagedAllocator(2048, 16), record_snapshots=False, check_invariants=True).summary
    w_plain = Workload("copies", w.requests, w.max_new_tokens)      # same prompts, nothing shared
    unshared = simulate(w_plain, PagedAllocator(2048, 16), record_snapshots=False).summary
    assert shared["peak_running"] > 2 * unshared["peak_running"]
    assert shared["peak_logical_tokens"] > 2048 >= shared["peak_used_slots"]
    assert unshared["peak_logical_tokens"] == unshared["peak_used_slots"]


def test_cli_reports_logical_and_physical_apart(capsys):
    assert main(["simulate", "--workload", "classroom-40", "--shared-prefix", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    p = out["paged"]
    assert p["shared_prefix"] == 256
    assert p["peak_logical_tokens"] > p["peak_used_slots"]
    assert p["peak_used_slots"] <= 2048
    assert p["finished"] == 40


def test_swap_moves_blocks_instead_of_recomputing():
    w = classroom_40()
    rec = simulate(w, PagedAllocator(2048, 16, preemption="recompute"), record_snapshots=False,
                   check_invariants=True).summary
    swp = simulate(w, PagedAllocator(2048, 16, preemption="swap"), record_snapshots=False,
                   check_invariants=True).summary
    assert rec["preemptions"] > 0 and rec["recomputed_tokens"] > 0 and rec["swapped_blocks"] == 0
    assert swp["preemptions"] > 0 and swp["swapped_blocks"] > 0 and swp["recomputed_tokens"] == 0
    assert swp["finished"] == rec["finished"] == 40


def test_a_swapped_in_sequence_is_not_prefilled_again():
    """Reference figure R9: swap moves blocks instead of recomputing, so with a host pool large
    enough for every swap, the prompts are the only tokens ever prefilled."""
    w = classroom_40()
    res = simulate(w, PagedAllocator(2048, 16, preemption="swap"), record_snapshots=False)
    assert res.summary["preemptions"] > 0 and res.summary["recomputed_tokens"] == 0
    assert int(res.metrics["prefill_tokens"].sum()) == sum(r.prompt_len for r in w.requests)


def test_full_host_pool_falls_back_to_recompute():
    w = classroom_40()
    res = simulate(w, PagedAllocator(2048, 16, preemption="swap", host_blocks=4), record_snapshots=False,
                   check_invariants=True).summary
    assert res["recomputed_tokens"] > 0 and res["finished"] == 40


def test_bad_preemption_mode():
    with pytest.raises(ValueError, match="preemption"):
        PagedAllocator(2048, 16, preemption="evict")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), prefix=st.integers(0, 120), block=st.integers(1, 64), total=st.integers(200, 3000),
       mode=st.sampled_from(["recompute", "swap"]), host=st.integers(0, 40), data=st.data())
def test_refcounts_match_block_tables_with_sharing(n, prefix, block, total, mode, host, data):
    """After every step (check_invariants): each block's refcount equals the number of block
    tables pointing at it, only prefix blocks are shared, and the host pool stays in bounds."""
    if block > total:
        block = total
    reqs = tuple(Request(i + 1, prefix + data.draw(st.integers(1, 80)), data.draw(st.integers(1, 60)),
                         data.draw(st.integers(0, 20))) for i in range(n))
    w = Workload("random", reqs, max_new_tokens=60, shared_prefix=prefix)
    res = simulate(w, PagedAllocator(total, block, preemption=mode, host_blocks=host), record_snapshots=False,
                   check_invariants=True)
    m = res.metrics
    assert res.summary["finished"] + len(res.rejected) == n
    assert (m["used_slots"] <= m["logical_tokens"]).all()
    assert (m["allocated_slots"] <= m["allocated_unshared"]).all()
    assert (m["used_slots"] <= m["allocated_slots"]).all()


@pytest.mark.parametrize("shared_prefix", [0, 256])
def test_swap_computes_each_token_once(shared_prefix):
    """With swap and a host pool large enough, every token goes through the model exactly once:
    each prompt in its one prefill (without prefix caching a shared system prompt shares memory,
    not compute), every later token in one decode. A swapped-in sequence decodes; it is not
    counted as admitted (R9)."""
    w = classroom_40()
    if shared_prefix:
        w = with_shared_prefix(w, shared_prefix)
    res = simulate(w, PagedAllocator(2048, 16, preemption="swap"), record_snapshots=False)
    m = res.metrics
    assert res.summary["preemptions"] > 0 and res.summary["recomputed_tokens"] == 0
    assert int(m["admitted"].sum()) == len(w.requests)                 # one prefill per request
    decodes = int((m["running"] - m["admitted"]).sum())
    assert decodes == sum(r.output_len for r in w.requests) - len(w.requests)
    assert int(m["prefill_tokens"].sum()) == sum(r.prompt_len for r in w.requests)


def test_a_swap_in_recomputes_only_shared_blocks_freed_while_it_was_out():
    """Swap copies only a sequence's private blocks to the host; the shared prompt blocks stay with
    their other holders. If those holders leave while it is out, the blocks are gone and their
    tokens are computed again at swap-in (from token 0 here); if a holder remains, nothing is."""
    a = PagedAllocator(1024, 16, preemption="swap")
    a.reset(shared_prefix=32)                          # two full 16-slot blocks of system prompt
    a.admit(1, 40, 40, 10)
    a.admit(2, 40, 50, 10)                             # shares them with sequence 1
    assert a.preempt(2) == "swap"
    a.free(1)                                          # their only other holder leaves
    assert a.admit(2, 40, 50, 10) == 64
    assert (a.last_lost_start, a.last_lost_tokens) == (0, 32)
    b = PagedAllocator(1024, 16, preemption="swap")
    b.reset(shared_prefix=32)
    b.admit(1, 40, 40, 10)
    b.admit(2, 40, 50, 10)
    assert b.preempt(2) == "swap"
    assert b.admit(2, 40, 50, 10) == 64                # sequence 1 still holds the prompt blocks
    assert (b.last_lost_start, b.last_lost_tokens) == (32, 0)
