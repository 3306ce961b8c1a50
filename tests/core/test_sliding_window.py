"""Sliding-window and hybrid paging (allocator/memory/sliding_window.py) under vLLM v1's rules.

The rule under test (vLLM's SlidingWindowManager): once a sequence has computed c tokens, the
blocks wholly among its first c - window + 1 tokens are released at the start of its next
allocation; a decoding sequence then holds at most ceil(window / block_size) + 1 blocks in each
windowed group.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.common.errors import FieldError
from allocator.engine.simulate import simulate
from allocator.engine.v1 import V1Rules
from allocator.memory.paged import PagedAllocator
from allocator.memory.sliding_window import (NULL_BLOCK, WindowedPagedAllocator, layer_groups, skipped_blocks,
                                             window_block_bound)
from allocator.workloads.requests import classroom_40, workload_from_lengths


def _one(prompt: int, output: int):
    return workload_from_lengths("one", [(prompt, output, 0)], max_new_tokens=output)


def test_rule_by_hand():
    # window 32, block 16: the token at position c attends to c - 31 .. c
    assert [skipped_blocks(c, 32, 16) for c in (0, 31, 46, 47, 62, 63, 99)] == [0, 0, 0, 1, 1, 2, 4]
    assert skipped_blocks(1000, None, 16) == 0                   # full attention never skips
    assert window_block_bound(32, 16) == 3 and window_block_bound(128, 16) == 9 and window_block_bound(33, 16) == 4
    assert layer_groups(128, 1, 1) == (None, 128)


def test_hundred_tokens_window_32_block_16_step_by_step():
    """A 100-token sequence (4-token prompt, 96 generated): block 0 (tokens 0-15) is released in the
    step that computes token 47, the first whose window (16..47) no longer reaches it; block 1 at
    token 63, block 2 at token 79, block 3 at token 95. It never holds more than 3 blocks."""
    alloc = WindowedPagedAllocator(1024, 16, sliding_window=32)
    r = simulate(_one(4, 96), alloc, rules=V1Rules(), check_invariants=True)
    released_at = {}
    for step, snap in sorted(r.snapshots.items()):
        tables = [e for e in snap if e[0] == 1]
        if not tables:
            continue
        (_, tokens, table), = tables
        computed_before = tokens - 1 if step else 0               # step 0 prefills the 4-token prompt
        nulls = sum(1 for b in table if b == NULL_BLOCK)
        assert table[:nulls] == (NULL_BLOCK,) * nulls
        assert nulls == max(0, computed_before - 31) // 16, (step, tokens, table)
        assert len(table) - nulls <= 3
        for k in range(nulls):
            released_at.setdefault(k, computed_before)
        if nulls:                                                 # released blocks drawn as such until reused
            assert snap[-1][0] == -1 and len(snap[-1][2]) == nulls
    assert released_at == {0: 47, 1: 63, 2: 79, 3: 95}
    assert r.window["released_blocks"] == 4 and r.window["peak_decode_window_blocks"] == 3
    assert r.summary.finished == 1


def test_calls_by_hand_release_goes_to_the_back_of_the_free_queue():
    alloc = WindowedPagedAllocator(64, 4, sliding_window=8)       # 16 blocks of 4
    assert alloc.v1_allocate(1, 12, 12, 12, final=20, computed=0)  # prefill 12 tokens: 3 blocks, none skipped
    assert alloc.group_tables[1] == [[0, 1, 2]]
    assert alloc.v1_allocate(1, 12, 13, 13, final=20, computed=12)  # skipped (12 - 7) // 4 = 1 block
    assert alloc.group_tables[1] == [[NULL_BLOCK, 1, 2, 3]]
    assert alloc.pool.num_free == 16 - 3
    assert list(alloc.pool.free_queue())[-1] == 0                 # queued at the back, as vLLM frees it
    alloc.check_invariants({1: 13})


def test_hybrid_one_pool_two_tables():
    """gpt-oss-style: one full-attention group and one windowed group draw from one pool of
    2 x 64 // 4 = 32 blocks; the full group keeps every block, the windowed one releases."""
    alloc = WindowedPagedAllocator(64, 4, sliding_window=8, full_groups=1, window_groups=1)
    assert alloc.num_blocks == 32 and alloc.total_slots == 128
    assert alloc.v1_allocate(1, 12, 12, 12, final=30, computed=0)
    full, win = alloc.group_tables[1]
    assert len(full) == len(win) == 3 and not set(full) & set(win)
    for c in range(12, 29):
        assert alloc.v1_allocate(1, 12, c + 1, c + 1, final=30, computed=c)
    full, win = alloc.group_tables[1]
    assert NULL_BLOCK not in full and len(full) == math.ceil(29 / 4)
    assert win.count(NULL_BLOCK) == (28 - 7) // 4 and len(win) - win.count(NULL_BLOCK) <= window_block_bound(8, 4)
    alloc.check_invariants({1: 29})
    stored, final = alloc.stored_counts(29, 30)
    assert stored == 2 * 29 - 4 * win.count(NULL_BLOCK) and final == stored + 2


def test_window_longer_than_every_sequence_changes_nothing():
    """A window no sequence outgrows is full attention: the same records as the plain paged pool."""
    w = classroom_40()
    plain = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(), record_snapshots=False)
    wide = simulate(w, WindowedPagedAllocator(2048, 16, sliding_window=10_000), rules=V1Rules(),
                    record_snapshots=False)
    for name, values in plain.metrics.items():
        assert np.array_equal(values, wide.metrics[name]), name
    assert wide.window["released_blocks"] == 0


def test_window_fits_more_sequences():
    w = classroom_40()
    full = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(), record_snapshots=False).summary
    win = simulate(w, WindowedPagedAllocator(2048, 16, sliding_window=64), rules=V1Rules(),
                   record_snapshots=False).summary
    assert win.mean_running_busy > 2 * full.mean_running_busy
    assert win.steps < full.steps


def test_refusals_name_the_field():
    with pytest.raises(FieldError, match="sliding_window"):
        WindowedPagedAllocator(2048, 16, sliding_window=0)
    with pytest.raises(FieldError, match="window_groups"):
        WindowedPagedAllocator(2048, 16, sliding_window=64, window_groups=0)
    with pytest.raises(FieldError, match="preemption"):
        WindowedPagedAllocator(2048, 16, sliding_window=64, preemption="swap")
    with pytest.raises(FieldError, match="rules"):
        simulate(classroom_40(), WindowedPagedAllocator(2048, 16, sliding_window=64))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.tuples(st.integers(1, 120), st.integers(1, 160), st.integers(0, 30)),
                        min_size=1, max_size=8),
       window=st.integers(1, 80), block_size=st.sampled_from([1, 2, 4, 8, 16]),
       full_groups=st.integers(0, 2), budget=st.integers(8, 512))
def test_bound_holds_at_every_step(lengths, window, block_size, full_groups, budget):
    """Every step: a decoding sequence holds <= ceil(window / block) + 1 blocks per windowed group
    (a step prefilling k tokens <= ceil((window - 1 + k) / block) + 1): check_invariants asserts it
    after each step; every request finishes; the pool's shares still partition it."""
    w = workload_from_lengths("prop", lengths, max_new_tokens=160)
    alloc = WindowedPagedAllocator(4096, block_size, sliding_window=window, full_groups=full_groups)
    r = simulate(w, alloc, rules=V1Rules(max_num_batched_tokens=budget), check_invariants=True)
    assert r.summary.finished == len(lengths)
    assert r.window["peak_decode_window_blocks"] <= window_block_bound(window, block_size)
    m = r.metrics
    assert (m["used_slots"] <= m["allocated_slots"]).all() and (m["reserved_slots"] >= 0).all()


def test_map_draws_released_blocks_and_names_them_in_the_legend():
    """The right-hand map colours a block released behind the window (free, not yet taken again) in
    its own state, and the figure's legend names it; a full-attention run has neither."""
    from allocator.engine.scenario import Scenario, run_scenario
    from allocator.viz.explainer_chart import explainer_figure
    from allocator.viz.maps import FREE, RELEASED, slot_states

    results = run_scenario(Scenario(rules="v1", sliding_window=64))
    paged = results["paged"]
    seen = 0
    for step in sorted(paged.snapshots)[:200]:
        snap = paged.snapshots[step]
        _, state = slot_states(paged, step)
        released = [e[2] for e in snap if e[0] == -1]
        expect = sum(len(b) for b in released) * paged.block_size
        assert (state == RELEASED).sum() == expect
        seen += expect
    assert seen > 0
    from allocator.viz.explainer_chart import _frame_text
    step = next(t for t in sorted(paged.snapshots) if any(e[0] == -1 for e in paged.snapshots[t]))
    n = sum(len(e[2]) for e in paged.snapshots[step] if e[0] == -1)
    assert f"violet: {n:,} block{'' if n == 1 else 's'} released behind the 64-token window" in _frame_text(paged, step)
    names = [t.name for t in explainer_figure(results).data]
    assert "free again: released behind the sliding window" in names
    plain = run_scenario(Scenario())
    assert "free again: released behind the sliding window" not in [t.name for t in explainer_figure(plain).data]
    _, state = slot_states(plain["paged"], 10)
    assert not (state == RELEASED).any() and (state == FREE).any()


def test_cli_prints_the_bound_and_refuses_bad_values(capsys):
    from allocator.__main__ import main

    assert main(["simulate", "--rules", "v1", "--sliding-window", "64", "--json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    w = out["paged"]["sliding_window"]
    assert w["bound_blocks"] == 5 and w["peak_decode_window_blocks"] <= 5 and "sliding_window" not in out["reserve_max"]
    # the full-attention run beside it is the plain paged run under the same rules, read from its own summary
    full = simulate(classroom_40(), PagedAllocator(2048, 16), rules=V1Rules(), record_snapshots=False).summary
    f = w["full_attention"]
    assert f["waited"] and f["mean_running"] == full.mean_running_busy and f["peak_running"] == full.peak_running
    assert f["window_mean_running"] == out["paged"]["mean_running_busy"]
    assert f["ratio"] == pytest.approx(f["window_mean_running"] / f["mean_running"]) and f["ratio"] > 2
    for argv, words in ((["--sliding-window", "64"], "--rules v1"),
                        (["--rules", "v1", "--sliding-window", "-1"], "from 0 to 10,000,000"),
                        (["--rules", "v1", "--full-attention-groups", "1"], "only with --sliding-window"),
                        (["--rules", "v1", "--sliding-window", "64", "--window-groups", "17"], "from 1 to 16")):
        assert main(["simulate", *argv]) != 0
        assert words in capsys.readouterr().err


def test_prefix_cache_keeps_released_blocks_findable_and_hits_only_the_window():
    """Window 8, block 4, a shared 40-token prompt. The first sequence's prompt blocks 0..9 are
    registered; its blocks behind the window go to the free queue *as cached blocks*. A second
    sequence with the same prompt hits: the full-attention group needs blocks 0..8 cached from the
    first (limit (41 - 1) // 4 = 10 ... capped at 9 by the last token), the windowed group only
    ceil(7 / 4) = 2 blocks before the hit's end, null before them."""
    alloc = WindowedPagedAllocator(256, 4, sliding_window=8, full_groups=1, window_groups=1, prefix_caching=True)
    alloc.reset(shared_prefix=40)
    assert alloc.v1_allocate(1, 40, 40, 40, final=50, computed=0)          # prefill: 10 blocks per group
    win_before = list(alloc.group_tables[1][1])
    assert alloc.v1_allocate(1, 40, 41, 41, final=50, computed=40)         # decode: (40 - 7) // 4 = 8 skipped
    full, win = alloc.group_tables[1]
    assert win[:8] == [NULL_BLOCK] * 8 and NULL_BLOCK not in full
    released = set(alloc.pool.cached_free_queue())
    assert released == set(alloc.snapshot({1: 41})[-1][2]) and len(released) == 8   # cached AND drawn released
    hits = alloc.v1_computed_blocks(2, 40, 40)
    assert len(hits) == 9                                                  # (40 - 1) // 4 blocks at most
    assert [h[0] for h in hits] == full[:9]                                # full group: every leading block
    # window: the last 2 blocks before the hit's end, null before; block 7 was released behind seq 1's
    # window but kept its hash, so the cache still finds it
    assert [h[1] for h in hits] == [NULL_BLOCK] * 7 + win_before[7:9] and win[7] == NULL_BLOCK
    assert alloc.v1_allocate(2, 40, 40, 40, hits, final=50, computed=36)
    assert alloc.group_tables[2][1][:7] == [NULL_BLOCK] * 7 and alloc.last_hit_tokens == 36
    assert win_before[7] not in alloc.pool.cached_free_queue()             # taken back out of the free queue
    assert win_before[7] not in alloc.snapshot({1: 41, 2: 40})[-1][2]      # and no longer drawn as released
    alloc.check_invariants({1: 41, 2: 40})
    alloc.v1_free(1)
    alloc.v1_free(2)
    alloc.check_invariants({})
    assert alloc.pool.num_free == alloc.num_blocks and alloc.shared_saving == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 90), st.integers(0, 20)), min_size=1, max_size=6),
       window=st.integers(1, 48), block_size=st.sampled_from([2, 4, 8]), full_groups=st.integers(0, 1),
       prefix=st.integers(0, 60), slots=st.integers(200, 1200))
def test_prefix_caching_with_a_window_keeps_every_rule(lengths, window, block_size, full_groups, prefix, slots):
    """Prefix caching and a window together, in pools small enough to preempt and evict: the
    bookkeeping checks (refcounts against tables, shared saving, null entries, the bound) hold after
    every step and every request finishes or is rejected."""
    from allocator.workloads.requests import with_shared_prefix
    w = with_shared_prefix(workload_from_lengths("prop", lengths, max_new_tokens=90), prefix)
    alloc = WindowedPagedAllocator(slots, block_size, sliding_window=window, full_groups=full_groups,
                                   prefix_caching=True)
    r = simulate(w, alloc, rules=V1Rules(max_num_batched_tokens=64), check_invariants=True)
    assert r.summary.finished + len(r.rejected) == len(lengths)
    assert r.window["peak_decode_window_blocks"] <= window_block_bound(window, block_size)
    m = r.metrics                                   # the shares still partition the pool
    assert (m["used_slots"] >= 0).all() and (m["used_slots"] <= m["allocated_slots"]).all()
    assert (m["duplicate_slots"] >= 0).all() and (m["reserved_slots"] >= 0).all()


def test_groups_of_the_shipped_hybrid_config_are_the_ones_the_cli_help_names():
    """gpt-oss-120b's shipped config (18 windowed of 36 layers, window 128) groups as vLLM groups it:
    one full-attention and one windowed KV-cache group, the --full-attention-groups 1 --window-groups 1
    that simulate --help gives for it."""
    from allocator.accounting.kv_configs import model_kv
    from allocator.cli.simulate import scenario_parser
    from allocator.memory.sliding_window import kv_cache_groups

    m = model_kv("gpt-oss-120b")
    assert (m.full_layers, m.window_layers, m.sliding_window) == (18, 18, 128)
    assert kv_cache_groups(m.full_layers, m.window_layers) == (1, 1)
    assert kv_cache_groups(10, 52) == (1, 6) and kv_cache_groups(0, 32) == (0, 1) and kv_cache_groups(20, 25) == (1, 1)
    squeezed = "".join(scenario_parser().format_help().split())          # argparse wraps at hyphens too
    assert "--sliding-window128--full-attention-groups1--window-groups1" in squeezed


def test_a_window_and_speculative_decoding_together_are_refused_by_name():
    """The windowed pool's releases do not account for lookahead slots, so the pair is refused rather
    than run with a window that releases nothing (found when the two branches met)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "allocator", "simulate", "--rules", "v1", "--sliding-window", "64",
                          "--num-speculative-tokens", "4"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout[-500:]
    assert "--num-speculative-tokens 4 with a sliding window" in out.stderr and "sliding window of 64 tokens" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
