"""Speculative decoding under vLLM v1 rules (issue 41, item 3) on hand-built cases.

Each decode step of a speculating sequence schedules its last token plus k draft tokens and grows
its block table to computed + 1 + k slots (vLLM's ``allocate_slots``, vllm/v1/core/kv_cache_manager.py);
the verifier accepts each draft with probability a until the first rejection (Leviathan et al. 2023,
section 3.1), the step emits the accepted drafts plus one token, and the rejected drafts' slots are
written over by the next step. The expected numbers in the comments are worked out by hand.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from allocator.__main__ import main
from allocator.accounting import capacity
from allocator.accounting.speculation import expected_tokens_per_step, speculation_capacity
from allocator.common.errors import FieldError
from allocator.engine.scenario import Scenario, build_workload
from allocator.engine.simulate import simulate
from allocator.engine.v1 import V1Rules, accepted_drafts
from allocator.memory.paged import PagedAllocator
from allocator.studies.speculation import speculation_cost
from allocator.workloads.requests import Request, Workload
from tests.tools.engine_digest import digest


def one(prompt: int, output: int) -> Workload:
    return Workload("hand", (Request(1, prompt, output, 0),), output)


def run(w, rules, slots=4096, bs=16):
    return simulate(w, PagedAllocator(slots, bs), rules=rules, check_invariants=True, record_snapshots=True)


def table_lengths(res) -> list[int]:
    """Blocks in request 1's table at the end of each step it ran."""
    return [len(snap[0][2]) for _, snap in sorted(res.snapshots.items()) if snap]


def tokens_held(res) -> list[int]:
    return [snap[0][1] for _, snap in sorted(res.snapshots.items()) if snap]


def test_k_lookahead_slots_take_a_block_at_the_boundary():
    # prompt 14, block 16. Step 0 prefills 14 tokens (1 block) and emits a token (15 tokens, 14 with KV).
    # Step 1 without speculation computes token 15: 15 slots, still 1 block. With k = 4 it schedules the
    # last token and 4 drafts: 14 + 5 = 19 slots -> 2 blocks, although (every draft rejected) only 15
    # tokens have KV.
    plain = run(one(14, 6), V1Rules())
    spec = run(one(14, 6), V1Rules(num_speculative_tokens=4, acceptance_rate=0.0))
    assert table_lengths(plain)[:2] == [1, 1]
    assert table_lengths(spec)[:2] == [1, 2]
    assert tokens_held(spec)[:2] == [14, 15] == tokens_held(plain)[:2]
    assert spec.metrics["units"].tolist()[1] == 2 and plain.metrics["units"].tolist()[1] == 1


def test_rejected_slots_are_given_back_to_the_next_step():
    # acceptance 0: each step keeps 1 token and rejects all 4 drafts. Computed c after step s (s >= 1) is
    # 14 + s; step s reserves c_before + 5 = 14 + (s - 1) + 5 = 18 + s slots. So the table is ceil((18 + s)
    # / 16) blocks: 2 blocks through step 14 (32 slots) -- the 4 rejected slots of one step are the room
    # the next step writes, no new block for them -- and a third block only at step 15 (33 slots).
    res = run(one(14, 20), V1Rules(num_speculative_tokens=4, acceptance_rate=0.0))
    lengths = table_lengths(res)
    assert lengths[0] == 1
    assert lengths[1:] == [-(-(18 + s) // 16) for s in range(1, len(lengths))]
    assert lengths.index(3) == 15
    assert tokens_held(res) == [14 + s for s in range(len(lengths))]
    assert res.metrics["tokens"].tolist() == [1] * 20          # one token a step: nothing accepted
    assert res.speculation == {"num_speculative_tokens": 4, "acceptance_rate": 0.0, "spec_seed": 0,
                               "draft_tokens": 19 * 4, "accepted_draft_tokens": 0}


def test_every_draft_accepted_emits_k_plus_one_a_step():
    # acceptance 1, k = 4, 12 tokens to emit: step 0 emits 1 (prefill), then 5, 5, and 1 (capped at the
    # answer's end): 4 steps; computed tokens 14, 19, 24, 25 (the last token emitted is never computed)
    res = run(one(14, 12), V1Rules(num_speculative_tokens=4, acceptance_rate=1.0))
    assert res.metrics["tokens"].tolist() == [1, 5, 5, 1]
    assert tokens_held(res) == [14, 19, 24]                    # the finished sequence has left at step 3
    assert table_lengths(res) == [1, 2, 2]                     # 14 + 5 = 19 and 19 + 5 = 24 slots
    assert res.speculation["draft_tokens"] == 12 and res.speculation["accepted_draft_tokens"] == 12 - 3


def test_a_short_budget_trims_the_drafts():
    # budget 3 tokens a step: a decode schedules its last token and 2 drafts, not 4
    res = run(one(2, 3), V1Rules(num_speculative_tokens=4, acceptance_rate=0.0, max_num_batched_tokens=3))
    assert res.speculation["draft_tokens"] == 2 * 2
    assert res.metrics["decode_pairs"].tolist()[1] == 3 * 2 + 3 * 4 // 2   # 3 queries after 2 computed tokens


def test_acceptance_is_seeded_and_follows_its_model():
    rng = np.random.default_rng(7)
    draws = [accepted_drafts(rng, 4, 0.7) for _ in range(20_000)]
    # E[accepted] = a + a^2 + a^3 + a^4 = 1.7731 (Leviathan et al. equation 1 less the one sampled token)
    assert abs(np.mean(draws) - (expected_tokens_per_step(4, 0.7) - 1)) < 0.03
    assert np.bincount(draws, minlength=5)[0] / len(draws) == pytest.approx(0.3, abs=0.01)   # first rejected
    assert accepted_drafts(rng, 3, 1.0) == 3 and accepted_drafts(rng, 3, 0.0) == 0 and accepted_drafts(rng, 0, 0.5) == 0
    w = build_workload(Scenario())
    a = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(num_speculative_tokens=3, spec_seed=11))
    b = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(num_speculative_tokens=3, spec_seed=11))
    c = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(num_speculative_tokens=3, spec_seed=12))
    assert digest(a) == digest(b) and a.speculation == b.speculation
    assert digest(a) != digest(c) and a.speculation != c.speculation


def test_k_zero_is_the_plain_run_whatever_the_rate_and_seed():
    w = build_workload(Scenario())
    plain = simulate(w, PagedAllocator(2048, 16), rules=V1Rules())
    zero = simulate(w, PagedAllocator(2048, 16), rules=V1Rules(num_speculative_tokens=0, acceptance_rate=0.2,
                                                               spec_seed=9))
    assert digest(plain) == digest(zero) and zero.speculation is None


def test_preemption_while_speculating_keeps_the_books():
    # a pool the lookahead slots overfill: preemptions happen and every invariant holds every step
    w = build_workload(Scenario())
    res = simulate(w, PagedAllocator(768, 16), rules=V1Rules(num_speculative_tokens=8), check_invariants=True)
    assert res.summary.finished == 40 and res.summary.preemptions > 0


def test_bad_settings_are_named():
    for kwargs, field in (({"num_speculative_tokens": -1}, "num_speculative_tokens"),
                          ({"num_speculative_tokens": 65}, "num_speculative_tokens"),
                          ({"num_speculative_tokens": 2.5}, "num_speculative_tokens"),
                          ({"acceptance_rate": 1.5}, "acceptance_rate"),
                          ({"acceptance_rate": float("nan")}, "acceptance_rate"),
                          ({"spec_seed": -3}, "spec_seed")):
        with pytest.raises(FieldError) as e:
            V1Rules(**kwargs)
        assert e.value.field == field
    with pytest.raises(FieldError) as e:
        Scenario(num_speculative_tokens=2).checked()        # classroom rules
    assert e.value.field == "num_speculative_tokens" and "v1" in str(e.value)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, words", [
    (["--num-speculative-tokens", "3"], "--num-speculative-tokens 3 applies only with --rules v1"),
    (["--rules", "v1", "--num-speculative-tokens", "65"], "from 0 to 64"),
    (["--rules", "v1", "--num-speculative-tokens", "2", "--acceptance-rate", "1.5"], "from 0 to 1"),
    (["--rules", "v1", "--acceptance-rate", "0.5"],
     "--acceptance-rate 0.5 applies only with --num-speculative-tokens"),
    (["--rules", "v1", "--spec-seed", "4"], "--spec-seed 4 applies only with --num-speculative-tokens"),
    (["--rules", "v1", "--num-speculative-tokens", "2", "--gpu", "a100-40gb"], "price no draft model"),
])
def test_cli_refuses_bad_speculation_settings(capsys, argv, words):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and words in err and "Traceback" not in err and not out


def test_cli_help_states_the_ranges(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0 to 64" in text and "0 to 1" in text and "Leviathan" in text


def test_cli_speculation_entry_is_the_study(capsys):
    argv = ["--slots", "1024", "--rules", "v1", "--num-speculative-tokens", "4", "--acceptance-rate", "0.6",
            "--spec-seed", "3"]
    code, out, _ = _cli(capsys, *argv, "--json")
    assert code == 0
    got = json.loads(out)["paged"]["speculation"]
    sc = Scenario(total_slots=1024, rules="v1", num_speculative_tokens=4, acceptance_rate=0.6, spec_seed=3)
    want = json.loads(json.dumps(speculation_cost(sc)))
    assert got == want and got["seeds"] == [3, 4, 5, 6, 7]
    # every draft position is reached with probability a^(i-1): accepted / verified = E[A] / k
    expect = (expected_tokens_per_step(4, 0.6) - 1) / 4
    assert abs(got["with"]["accepted_fraction"]["mean"] - expect) < 0.02
    # the lookahead holds slots with no token in them: more than without speculation, at every seed
    assert got["with"]["empty_slots_per_sequence"]["min"] > got["without"]["empty_slots_per_sequence"]
    code, text, _ = _cli(capsys, *argv)
    assert code == 0 and f"{got['with']['empty_slots_per_sequence']['mean']:.1f}" in text


def test_capacity_arithmetic_of_lookahead_slots():
    # 7B fp16 (512 KiB a token), 66 GiB, mean 350 tokens, blocks of 16 (reference figures R5): 22 blocks,
    # 384 sequences at k = 0; k = 2 -> ceil(352 / 16) = 22 blocks still; k = 3 -> 23 blocks (368 slots,
    # floor(66 GiB / 184 MiB) = 367 sequences); k = 8 -> ceil(358 / 16) = 23 blocks as well.
    cap = capacity(512 * 1024, 66 * 2**30, 2048, 350, 16)
    rows = speculation_capacity(cap, 0.7)
    assert [r.k for r in rows] == list(range(9))
    assert rows[0].blocks == cap.paged_blocks == 22 and rows[0].fit == cap.fit_paged == 384
    assert [r.blocks for r in rows] == [22, 22, 22, 23, 23, 23, 23, 23, 23]
    assert rows[3].fit == 66 * 2**30 // (368 * 512 * 1024) == 367 and rows[3].fewer == 17
    assert rows[2].fewer == 0 and rows[8].extra_bytes == 16 * 512 * 1024
    assert rows[0].tokens_per_step == 1 and rows[1].tokens_per_step == pytest.approx(1.7)
    assert rows[2].rejected_per_step == pytest.approx(3 - (1 + 0.7 + 0.49))
    assert expected_tokens_per_step(5, 1.0) == 6
    with pytest.raises(FieldError):
        speculation_capacity(cap, -0.1)
    # a mean at the max context: the lookahead is capped there, as vLLM caps at max_model_len
    full = speculation_capacity(capacity(512 * 1024, 66 * 2**30, 2048, 2048, 16), 0.7)
    assert {r.blocks for r in full} == {128} and {r.fewer for r in full} == {0}


def test_capacity_cli_prints_the_pages_speculation_rows(capsys):
    capsys.readouterr()
    argv = ["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350"]
    assert main([*argv, "--json"]) == 0
    assert "speculation" not in json.loads(capsys.readouterr().out)        # not asked: as before
    assert main([*argv, "--acceptance-rate", "0.7", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["speculation"]
    want = speculation_capacity(capacity(512 * 1024, 66 * 2**30, 2048, 350, 16), 0.7)
    assert got["acceptance_rate"] == 0.7 and [r["fit"] for r in got["rows"]] == [r.fit for r in want]
    assert [r["fit"] for r in got["rows"]][::4] == [384, 367, 367]
    assert main([*argv, "--acceptance-rate", "0.7"]) == 0
    assert "367 sequences fit instead of 384 (17 fewer)" in capsys.readouterr().out
    assert main([*argv[:-2], "--lengths", "5,9", "--acceptance-rate", "0.7"]) == 2
    assert "give --mean-tokens instead of --lengths" in capsys.readouterr().err
    assert main([*argv, "--acceptance-rate", "1.7"]) == 2
    assert "from 0 to 1" in capsys.readouterr().err


def test_prefix_caching_and_a_tight_budget_keep_the_books_while_speculating():
    # a shared system prompt found by the prefix cache, a 64-token budget that trims drafts, a pool that
    # preempts: every invariant holds each step, and the cache finds the shared prompt as in the plain run
    w = build_workload(Scenario(shared_prefix=64, max_new_tokens=200))
    plain = simulate(w, PagedAllocator(768, 16, prefix_caching=True), rules=V1Rules(max_num_batched_tokens=64))
    res = simulate(w, PagedAllocator(768, 16, prefix_caching=True),
                   rules=V1Rules(num_speculative_tokens=5, max_num_batched_tokens=64), check_invariants=True)
    assert res.summary["finished"] == 40 and res.summary["preemptions"] > 0
    assert res.summary["prefix_cache_hit_rate"] == plain.summary["prefix_cache_hit_rate"]
    assert 0 < res.speculation["accepted_draft_tokens"] < res.speculation["draft_tokens"]
