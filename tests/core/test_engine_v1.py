"""vLLM v1's scheduler rules (``simulate(..., rules=V1Rules(...))``) on hand-built cases.

Each case is small enough to work out by hand; the expected numbers in the comments are that
working. Source of the rules: vllm/v1/core/sched/scheduler.py (``Scheduler.schedule``) and
vllm/v1/core/kv_cache_manager.py (``get_computed_blocks``, ``allocate_slots``).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.memory.paged import PagedAllocator
from allocator.workloads.requests import Request, Workload
from allocator.engine.simulate import simulate
from allocator.engine.v1 import V1Rules
from allocator.common.errors import FieldError


def wl(*rows, prompts=None):
    """Requests (prompt, output, arrival_step) with ids 1, 2, ..."""
    reqs = tuple(Request(i, p, o, a) for i, (p, o, a) in enumerate(rows, start=1))
    return Workload("hand", reqs, max(o for _, o, _ in rows), prompts=prompts)


def run(w, rules, slots=4096, bs=16, caching=False):
    return simulate(w, PagedAllocator(slots, bs, prefix_caching=caching), rules=rules, check_invariants=True)


def col(res, name):
    return res.metrics[name].tolist()


def test_prompt_longer_than_budget_is_prefilled_in_chunks():
    # 200-token prompt, budget 64: chunks 64, 64, 64, 8 in steps 0-3; the step that completes the
    # prompt (3) emits the first token; two decodes follow (steps 4, 5).
    res = run(wl((200, 3, 0)), V1Rules(max_num_batched_tokens=64))
    assert col(res, "prefill_tokens") == [64, 64, 64, 8, 0, 0]
    assert col(res, "tokens") == [0, 0, 0, 1, 1, 1]
    assert res.requests["first_token_step"].tolist() == [3]
    assert res.requests["finish_step"].tolist() == [5]
    # causal pairs of each chunk: its queries attend to everything before them and themselves
    assert col(res, "prefill_pairs")[:4] == [64 * 65 // 2, 64 * 64 + 64 * 65 // 2, 128 * 64 + 64 * 65 // 2,
                                              192 * 8 + 8 * 9 // 2]
    # the chunked prompt is refused outright when chunked prefill is off
    off = run(wl((200, 3, 0), (10, 2, 0)), V1Rules(max_num_batched_tokens=64, chunked_prefill=False))
    assert [r["id"] for r in off.rejected] == [1] and "chunked prefill is off" in off.rejected[0]["reason"]


def test_running_decodes_are_served_before_a_new_prefill():
    # r1 (prompt 10) runs from step 0; r2 (prompt 100) arrives at step 1 with a budget of 32:
    # step 1 schedules r1's decode (1 token) first, then 31 tokens of r2's prompt; then 31, 31,
    # 7 -> r2's prompt completes in step 4, while r1 keeps decoding every step.
    res = run(wl((10, 6, 0), (100, 2, 1)), V1Rules(max_num_batched_tokens=32))
    assert col(res, "prefill_tokens")[:5] == [10, 31, 31, 31, 7]
    assert col(res, "decode_pairs")[1:5] == [11, 12, 13, 14]     # r1's decode each step, its context growing
    assert res.requests["first_token_step"].tolist() == [0, 4]
    assert res.requests["finish_step"].tolist() == [5, 5]


def test_cap_on_running_sequences():
    # four 8-token prompts at step 0, two may run: r3 is admitted the step after r1 and r2 finish
    # (they emit 3 tokens in steps 0-2), r4 with it; nothing else ever runs beside them.
    res = run(wl((8, 3, 0), (8, 3, 0), (8, 3, 0), (8, 3, 0)), V1Rules(max_num_seqs=2))
    assert max(col(res, "running")) == 2
    assert res.requests["first_token_step"].tolist() == [0, 0, 3, 3]
    assert col(res, "waiting")[:3] == [2, 2, 2]


def test_admission_takes_no_block_for_the_token_prefill_emits():
    # a 32-token prompt at block size 16: v1 holds 2 blocks after its prefill (the classroom
    # scheduler takes a third for the emitted token); the third comes with the first decode.
    res = run(wl((32, 3, 0)), V1Rules())
    assert col(res, "units") == [2, 3, 0]
    classroom = simulate(wl((32, 3, 0)), PagedAllocator(4096, 16), check_invariants=True)
    assert int(classroom.metrics["units"][0]) == 3


class Conversation:
    """Prompt and answer token ids: turn 2's prompt repeats turn 1's prompt and answer."""

    def __init__(self):
        p1 = list(range(100, 132))                         # 32 prompt tokens
        self.out1 = list(range(500, 540))                  # 40 answer tokens
        self._prompts = {1: p1, 2: p1 + self.out1 + list(range(900, 908))}

    def __contains__(self, rid):
        return rid in self._prompts

    def tokens(self, rid):
        return np.array(self._prompts[rid])

    def output_tokens(self, rid):
        return np.array(self.out1 if rid == 1 else [])


def test_cached_generated_blocks_are_found_by_a_later_prompt():
    # r1 computes its 32 prompt tokens and 39 of its 40 answer tokens (the last one is emitted,
    # never fed back): 71 tokens -> 4 full blocks cached, 2 of them holding generated tokens.
    # r2 (arriving after r1 finished) starts with those 72 tokens: it finds 4 blocks = 64 tokens
    # and prefills only 80 - 64 = 16.
    res = run(wl((32, 40, 0), (80, 2, 60), prompts=Conversation()), V1Rules(), caching=True)
    assert res.requests["finish_step"].tolist()[0] < 60
    assert res.summary["prefill_tokens_saved"] == 64
    r2 = int(np.flatnonzero(res.metrics["admitted"])[-1])
    assert int(res.metrics["prefill_tokens"][r2]) == 16
    # the classroom allocator caches prompt blocks only: it finds r1's 2 prompt blocks, 32 tokens
    old = simulate(wl((32, 40, 0), (80, 2, 60), prompts=Conversation()),
                   PagedAllocator(4096, 16, prefix_caching=True), check_invariants=True)
    assert old.summary["prefill_tokens_saved"] == 32


def test_preemption_is_recompute_and_finds_its_own_cached_blocks():
    # 8 blocks of 16: r1 and r2 (prompts 48) fill 6; as they decode they need more, r2 (the
    # youngest) is preempted, its blocks freed but still cached; on return it finds them.
    w = wl((48, 40, 0), (48, 40, 0))
    res = run(w, V1Rules(), slots=8 * 16, caching=True)
    assert res.summary["preemptions"] >= 1 and res.summary["finished"] == 2
    assert res.summary["recomputed_tokens"] > 0
    no_cache = run(w, V1Rules(), slots=8 * 16, caching=False)
    assert sum(col(res, "prefill_tokens")) < sum(col(no_cache, "prefill_tokens"))
    with pytest.raises(FieldError) as err:
        simulate(w, PagedAllocator(8 * 16, 16, preemption="swap"), rules=V1Rules())
    assert err.value.field == "preemption"


def test_bad_rules_name_their_field():
    for kwargs, field in (({"max_num_seqs": 0}, "max_num_seqs"), ({"max_num_batched_tokens": 1.5},
                                                                    "max_num_batched_tokens")):
        with pytest.raises(FieldError) as err:
            V1Rules(**kwargs)
        assert err.value.field == field


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 30), st.integers(0, 20)), min_size=1, max_size=8),
       budget=st.integers(1, 64), cap=st.integers(1, 4), blocks=st.integers(8, 24), bs=st.sampled_from([1, 4, 16]),
       caching=st.booleans(), chunked=st.booleans())
def test_v1_rules_hold_on_random_workloads(rows, budget, cap, blocks, bs, caching, chunked):
    w = wl(*rows)
    res = run(w, V1Rules(max_num_seqs=cap, max_num_batched_tokens=budget, chunked_prefill=chunked),
              slots=blocks * bs, bs=bs, caching=caching)
    served = res.requests["id"].tolist()
    assert sorted(served + [r["id"] for r in res.rejected]) == list(range(1, len(rows) + 1))
    assert int(res.metrics["tokens"].sum()) == sum(rows[i - 1][1] for i in served)
    assert int(res.metrics["running"].max(initial=0)) <= cap
    busy = res.metrics["span"] == 1
    work = res.metrics["prefill_tokens"] + (res.metrics["decode_pairs"] > 0)
    assert (res.metrics["prefill_tokens"][busy] <= budget).all() and (work <= budget).all()
    assert (res.requests["first_token_step"] <= res.requests["finish_step"]).all()


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(0, 8)), min_size=2, max_size=14),
       budget=st.integers(2, 24), cap=st.integers(2, 12), blocks=st.integers(6, 60), bs=st.sampled_from([1, 2, 4, 16]),
       chunked=st.booleans())
def test_the_v1_shortcuts_change_no_number(rows, budget, cap, blocks, bs, chunked):
    """The v1 loop's two shortcuts -- the woken decoders of a decode-only step grown in one call
    (``V1Scheduler._decode_woken``) and a binding budget walked only through the active when
    every decoder still gets its token (``V1Scheduler._decoders_all_fit``) -- give every number
    and picture the loop gives without them, on random workloads, pools and budgets."""
    from unittest import mock

    from allocator.engine.v1 import V1Scheduler
    from tests.tools.engine_digest import digest

    w = wl(*rows)
    rules = V1Rules(max_num_seqs=cap, max_num_batched_tokens=budget, chunked_prefill=chunked)

    def go():
        return simulate(w, PagedAllocator(blocks * bs, bs), rules=rules, record_snapshots=True,
                        check_invariants=True)

    fast = go()
    with mock.patch.object(V1Scheduler, "_decode_woken", lambda self, woke, done, t: None), \
            mock.patch.object(V1Scheduler, "_decoders_all_fit", lambda self, active: False):
        slow = go()
    assert digest(fast) == digest(slow)
