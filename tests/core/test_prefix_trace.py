"""Prefix caching replayed on the Mooncake conversation trace (issue 15): the engine's hit rate
against the trace's own statistic, counted here from the block ids without the engine.

The trace describes each prompt as a list of ids, one per 512-token block, where equal leading ids
mean an equal prefix. The statistic: per request, in order, the leading blocks whose whole chain of
ids an earlier request already had. The engine differs from that count only by its own rules, which
``_count`` applies when asked: (1) only full blocks are cached, so a request's partial last block is
never found later; (2) the block holding the prompt's last token is always computed (its logits
start the output), so at most ``(prompt_len - 1) // 512`` blocks are found.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from allocator.studies import prefix_cache
from allocator.workloads.mooncake import MOONCAKE_TRACE, mooncake_workload, shipped_mooncake
from tests.conftest import ROOT

BLOCK = 512


def _count(df, engine_rules: bool) -> dict:
    """The trace statistic over the rows of ``df``, in order (independent of allocator code)."""
    seen = set()
    blocks_hit = blocks = tokens_hit = tokens = 0
    for ids, n_tokens in zip(df["hash_ids"], df["prompt_tokens"]):
        ids, n_tokens = list(ids), int(n_tokens)
        n_full = n_tokens // BLOCK
        usable = min(n_full, (n_tokens - 1) // BLOCK) if engine_rules else len(ids)
        hit = 0
        while hit < usable and tuple(ids[:hit + 1]) in seen:
            hit += 1
        blocks_hit += hit
        blocks += len(ids)
        tokens_hit += min(hit * BLOCK, n_tokens)
        tokens += n_tokens
        seen.update(tuple(ids[:i + 1]) for i in range(n_full if engine_rules else len(ids)))
    return {"blocks_hit": blocks_hit, "blocks": blocks, "tokens_hit": tokens_hit, "tokens": tokens}


@pytest.fixture(scope="module")
def trace():
    return shipped_mooncake()


def test_the_trace_statistic_itself(trace):
    raw = _count(trace, engine_rules=False)
    # 36.6 % of the conversation trace's blocks are a prefix an earlier request had (issue 15)
    assert (raw["blocks_hit"], raw["blocks"]) == (105_710, 288_500)
    assert round(100 * raw["blocks_hit"] / raw["blocks"], 1) == 36.6
    # the About page quotes this count
    with open(os.path.join(ROOT, "pages", "about.py"), encoding="utf-8") as f:
        about = f.read()
    assert f"({100 * raw['blocks_hit'] / raw['blocks']:.1f} % of the conversation trace's 512-token blocks" in about
    # token-weighted: 37.4 % of prompt tokens
    assert (raw["tokens_hit"], raw["tokens"]) == (54_098_411, 144_793_823)
    assert round(100 * raw["tokens_hit"] / raw["tokens"], 2) == 37.36
    # the engine's two rules take away 118 blocks (35,307 tokens): 37.34 % of tokens
    ruled = _count(trace, engine_rules=True)
    assert (ruled["blocks_hit"], ruled["tokens_hit"]) == (105_592, 54_063_104)
    assert round(100 * ruled["tokens_hit"] / ruled["tokens"], 2) == 37.34
    # what the page draws as its dashed line is this same count
    wl = mooncake_workload(trace, offset=0, count=len(trace))
    for rules, mine in ((False, raw), (True, ruled)):
        theirs = prefix_cache.trace_hit_statistic(wl, engine_rules=rules)
        assert {k: theirs[k] for k in mine} == mine


def test_block_512_with_a_pool_that_never_evicts_lands_exactly_on_the_trace(trace):
    wl = mooncake_workload(trace, offset=0, count=len(trace))
    pool = 200_000                                 # distinct full prompt blocks: 170,899
    assert prefix_cache.distinct_prompt_blocks(wl, BLOCK) == 170_899
    s = prefix_cache.run(wl, BLOCK, pool).summary
    assert s["cached_block_evictions"] == 0 and s["preemptions"] == 0 and not s["rejected"]
    ruled = _count(trace, engine_rules=True)
    assert s["prefill_tokens_saved"] == ruled["tokens_hit"] == 54_063_104
    assert s["prompt_tokens_admitted"] == ruled["tokens"]
    assert s["prefix_cache_hit_rate"] == round(ruled["tokens_hit"] / ruled["tokens"], 6) == 0.37338


def test_block_16_finds_at_least_what_block_512_finds(trace):
    """On 2,000 requests (the whole trace at block 16 would need ~5.5 million blocks): a 512-token
    block the trace calls different can still start with whole 16-token blocks in common."""
    wl = mooncake_workload(trace, offset=0, count=2000)
    ruled = _count(trace.iloc[:2000], engine_rules=True)
    s512 = prefix_cache.run(wl, BLOCK, prefix_cache.distinct_prompt_blocks(wl, BLOCK) + 20_000).summary
    assert s512["cached_block_evictions"] == 0 and s512["prefill_tokens_saved"] == ruled["tokens_hit"] == 8_066_048
    distinct16 = prefix_cache.distinct_prompt_blocks(wl, 16)
    s16 = prefix_cache.run(wl, 16, distinct16 + 50_000).summary
    assert s16["cached_block_evictions"] == 0
    assert s16["prefill_tokens_saved"] >= s512["prefill_tokens_saved"]
    assert (s512["prefix_cache_hit_rate"], s16["prefix_cache_hit_rate"]) == (0.293933, 0.294108)


def test_smaller_pools_find_less(trace):
    wl = mooncake_workload(trace, offset=0, count=1000)
    sweep = prefix_cache.pool_sweep(wl, BLOCK)
    assert sweep.distinct_blocks == 20_527
    assert [r["pool_blocks"] for r in sweep.rows] == [1027, 2053, 5132, 10264, 20527, 25659]
    rates = [r["hit_rate"] for r in sweep.rows]
    assert rates == sorted(rates) and rates[0] < rates[-1] / 5
    # one pass (LRU stack distances): the rows of at least peak_in_use blocks are the engine's own
    # figures; the first two pools are smaller, so theirs are the LRU model's (the engine's own runs
    # there find 0.039035 and 0.045: see test_one_pass_curve_against_the_engine)
    assert sweep.peak_in_use == 2508
    assert [r["exact"] for r in sweep.rows] == [False, False, True, True, True, True]
    assert rates == [0.042502, 0.045, 0.108231, 0.177242, 0.215493, 0.215493]
    # the pool of 1.25 x the distinct blocks never evicts and lands on the trace's count
    assert sweep.rows[-1]["cached_block_evictions"] == 0
    ruled = _count(trace.iloc[:1000], engine_rules=True)
    assert sweep.rows[-1]["prefill_tokens_saved"] == ruled["tokens_hit"]
    # saved prefill is the hit rate's numerator
    for r in sweep.rows:
        assert r["prefill_tokens_saved"] / r["prompt_tokens_admitted"] == pytest.approx(r["hit_rate"], abs=5e-7)
    # the drawn curve passes through the rows and never falls as the pool grows
    curve = sweep.curve
    for r in sweep.rows:
        i = list(curve["pool_blocks"]).index(r["pool_blocks"])
        assert curve["prefill_tokens_saved"][i] == r["prefill_tokens_saved"]
    assert (np.diff(curve["hit_rate"]) >= 0).all() and (np.diff(curve["cached_block_evictions"]) <= 0).all()


#: The stated tolerance of the one-pass curve below ``peak_in_use`` (percentage points of prompt tokens).
MODEL_TOLERANCE_PP = prefix_cache.MODEL_TOLERANCE_PP


@pytest.mark.parametrize("offset,count,block", [(0, 1000, BLOCK), (5000, 500, 64), (8000, 200, 16)])
def test_one_pass_curve_against_the_engine(trace, offset, count, block):
    """The check the page's caption describes: the engine replayed at each pool size of the sweep.
    Pools of at least ``peak_in_use`` blocks run the one-pass replay's own schedule, so hit rate,
    prefill saved, evictions, steps and preemptions are equal exactly; below, the engine delays or
    preempts requests and its hit rate stays within MODEL_TOLERANCE_PP of the model's."""
    assert MODEL_TOLERANCE_PP == 2.0            # the figure the page's caption and the docstring state
    wl = mooncake_workload(trace, offset=offset, count=count)
    sweep = prefix_cache.pool_sweep(wl, block)
    assert any(r["exact"] for r in sweep.rows) and not all(r["exact"] for r in sweep.rows)
    for r in sweep.rows:
        s = prefix_cache.run(wl, block, r["pool_blocks"]).summary
        assert s["prompt_tokens_admitted"] == r["prompt_tokens_admitted"] or not r["exact"]
        if r["exact"]:
            assert (s["prefix_cache_hit_rate"], s["prefill_tokens_saved"], s["cached_block_evictions"],
                    s["steps"], s["preemptions"]) == (r["hit_rate"], r["prefill_tokens_saved"],
                                                      r["cached_block_evictions"], r["steps"], 0)
        else:
            assert abs(s["prefix_cache_hit_rate"] - r["hit_rate"]) * 100 <= MODEL_TOLERANCE_PP
            assert r["steps"] is None and r["preemptions"] is None


class _TokensOnly:
    """A window's prompts offering token ids only (no trace block keys): the engine hashes tokens."""

    def __init__(self, prompts):
        self._p = prompts

    def __contains__(self, request_id) -> bool:
        return request_id in self._p

    def tokens(self, request_id):
        return self._p.tokens(request_id)


@pytest.mark.parametrize("block", [16, 7, 48, 512, 1000])
def test_trace_block_keys_match_exactly_where_hashed_tokens_match(trace, block):
    """The trace's chained-id keys (no hashing) and the hashed token keys pair one to one over a
    window's full blocks: two blocks share a key under one scheme exactly when they do under the
    other (same tokens up to and including the block, assets/reference_figures.md R8)."""
    from allocator.memory.block_hash import prefix_block_keys

    prompts = mooncake_workload(trace, offset=2000, count=300 if block >= 16 else 60).prompts
    ids = sorted(prompts._ids)
    to_trace, to_tokens = {}, {}
    for rid in ids:
        hashed = prefix_block_keys(prompts.tokens(rid), block, as_bytes=True)
        keys = prompts.block_keys(rid, block)
        assert keys == prompts.block_keys(rid, block, as_array=True).tolist() and len(keys) == len(hashed)
        for k, h in zip(keys, hashed):
            assert to_trace.setdefault(h, k) == k and to_tokens.setdefault(k, h) == h
    assert len(to_trace) == len(to_tokens) > len(ids)          # and blocks are shared between prompts


def test_the_array_pool_and_trace_keys_give_the_list_pool_and_hashed_tokens_run_exactly(trace):
    """The fast path of a prefix-caching replay (ArrayBlockPool, trace block keys) against the
    plain one (the list BlockPool, hashed token ids): every metric, summary figure and pool picture
    equal, on a pool small enough to evict, pictures included."""
    import dataclasses

    from allocator.memory.block_pool import BlockPool
    from allocator.memory.paged import PagedAllocator
    from allocator.engine.simulate import simulate
    from allocator.memory.array_pool import ArrayBlockPool
    from tests.tools.engine_digest import digest, picture_as_tuples

    wl = mooncake_workload(trace, offset=300, count=150)
    pool = prefix_cache.distinct_prompt_blocks(wl, 16) // 4
    fast = PagedAllocator(pool * 16, 16, prefix_caching=True)
    plain = PagedAllocator(pool * 16, 16, prefix_caching=True)
    plain.pool_class = lambda n, cache_freed: BlockPool(n, cache_freed=cache_freed)
    a = simulate(wl, fast)
    b = simulate(dataclasses.replace(wl, prompts=_TokensOnly(wl.prompts)), plain)
    assert isinstance(fast.pool, ArrayBlockPool) and type(plain.pool) is BlockPool
    assert a.summary["cached_block_evictions"] > 0 and a.summary["prefill_tokens_saved"] > 0
    assert {k: picture_as_tuples(v) for k, v in a.snapshots.items()} == b.snapshots and a.summary == b.summary
    b.workload = a.workload
    assert digest(a) == digest(b)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "allocator", "simulate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_prefix_caching_json_adds_the_cache_figures_to_the_paged_summary():
    out = _cli("--trace", MOONCAKE_TRACE, "--offset", "100", "--count", "50", "--prefix-caching", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    paged, reserve = data["paged"], data["reserve_max"]
    for key in ("prefix_cache_hit_rate", "prefill_tokens_saved", "cached_block_evictions"):
        assert key in paged and key not in reserve
    # the same run made directly: 2**20 slots of 16 (the default pool of a Mooncake replay)
    wl = mooncake_workload(shipped_mooncake(), offset=100, count=50)
    direct = prefix_cache.run(wl, 16, 2 ** 20 // 16).summary
    assert (paged["prefix_cache_hit_rate"], paged["prefill_tokens_saved"], paged["cached_block_evictions"]) == (
        direct["prefix_cache_hit_rate"], direct["prefill_tokens_saved"], direct["cached_block_evictions"])
    assert paged["prefill_tokens_saved"] == 25_088 and paged["total_slots"] == 2 ** 20
    # without the flag: no cache figures, and nothing found
    plain = json.loads(_cli("--trace", MOONCAKE_TRACE, "--offset", "100", "--count", "50", "--json").stdout)
    assert "prefix_cache_hit_rate" not in plain["paged"]


def test_cli_prefix_caching_with_nothing_to_find_says_so():
    out = _cli("--workload", "classroom-40", "--prefix-caching")
    assert out.returncode == 0
    assert "--prefix-caching has nothing to find" in out.stderr and "ignored" in out.stderr
    assert "prefix_cache_hit_rate" not in out.stdout
    shared = _cli("--workload", "classroom-40", "--prefix-caching", "--shared-prefix", "64")
    assert shared.returncode == 0 and "prefix_cache_hit_rate" in shared.stdout and not shared.stderr


def test_cli_prefix_caching_when_every_request_is_rejected(tmp_path):
    """Nothing admitted, so there is no hit rate to report (null, '-'), and nothing saved."""
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1, "output_length": 64, "hash_ids": [0]}\n')
    out = _cli("--trace", str(trace), "--prefix-caching", "--slots", "64", "--json")
    assert out.returncode == 0, out.stderr
    paged = json.loads(out.stdout)["paged"]
    assert paged["finished"] == 0 and len(paged["rejected"]) == 1
    assert paged["prefix_cache_hit_rate"] is None and paged["prefill_tokens_saved"] == 0
    table = _cli("--trace", str(trace), "--prefix-caching", "--slots", "64").stdout
    assert [line.split() for line in table.splitlines() if line.startswith("prefix_cache_hit_rate")] == [
        ["prefix_cache_hit_rate", "-", "-"]]
