"""The cost model (allocator.cost.timing): every term against a hand calculation, and what a run's
seconds must satisfy (issue 14's acceptance tests).

Figures used by hand: OPT-13B has 12,853,473,280 parameters (fp16: 25,706,946,560 bytes of
weights), 40 layers x 40 heads x 128 dims, 819,200 bytes (800 KiB) of K and V per token; the
A100 40GB preset has 312e12 FLOP/s, 1.555e12 bytes/s of HBM, 32e9 bytes/s of PCIe one way and
40 GiB; the model's assumptions are 2 ms per step and 5 us per host copy.
"""

import numpy as np
import pytest

from allocator.memory.paged import PagedAllocator
from allocator.memory.reserve_max import ReserveMaxAllocator
from allocator.engine.simulate import simulate
from allocator import accounting as acc
from allocator.engine.scenario import Scenario, run_scenario
from allocator.cost.roofline import (GPUS, TIMED_MODELS, CostModel, attention_flops, cost_model, gpu_preset,
                                     kv_bytes, linear_flops, min_gpus, timed_model, transfers_per_block,
                                     weight_bytes)
from allocator.cost.timing import breakdown, price
from allocator.common.errors import FieldError
from allocator.workloads.requests import Request, Workload

P = 12_853_473_280            # OPT-13B parameters
W = 2 * P                     # its fp16 weights (bytes)
KV = 40 * 40 * 128 * 2 * 2    # 819,200 bytes per token
FLOPS, HBM, LINK = 312e12, 1.555e12, 32e9


@pytest.fixture(scope="module")
def a100():
    return cost_model("a100-40gb", "opt-13b")


def test_each_term_by_hand(a100):
    m = a100.model
    assert linear_flops(m, 10) == 2 * P * 10 == 257_069_465_600
    assert attention_flops(m, 100) == 4 * 40 * 40 * 128 * 100 == 81_920_000
    assert weight_bytes(m) == W == 25_706_946_560
    assert kv_bytes(m, 3) == 3 * KV == 2_457_600
    assert transfers_per_block(m) == 2 * 40
    # 10 blocks of 16 slots: 10 x 16 x 819,200 bytes over 32 GB/s, plus 10 x 80 copies x 5 us
    assert a100.swap_seconds(10, 16) == pytest.approx(10 * 16 * KV / LINK + 10 * 80 * 5e-6)
    assert a100.swap_seconds(10, 16) == pytest.approx(0.004096 + 0.004)


def test_a_decode_step_is_memory_bound(a100):
    """4 sequences decode, each holding 1,000 tokens at the end of the step (4,000 KV tokens read)."""
    compute = (2 * P * 4 + 4 * 40 * 40 * 128 * 4000) / FLOPS            # 3.4e-4 s
    memory = (W + KV * (4000 + 4)) / HBM                                 # weights + KV read + KV written
    assert memory == pytest.approx(0.018641172, rel=1e-6) and compute < memory
    t = a100.step_seconds(0, 0, 4, 4000, 0)
    assert t == pytest.approx(memory + 0.002)


def test_a_prefill_step_is_compute_bound(a100):
    """One 2,000-token prompt: 2 x P x 2,000 weight FLOPs + 2,000 x 2,001 / 2 attention pairs."""
    pairs = 2000 * 2001 // 2
    compute = (2 * P * 2000 + 4 * 40 * 40 * 128 * pairs) / FLOPS
    memory = (W + KV * 2000) / HBM
    assert compute == pytest.approx(0.170042, rel=1e-5) and compute > memory
    assert a100.step_seconds(2000, pairs, 0, 0, 0) == pytest.approx(compute + 0.002)
    # a step that only swaps (everything preempted, nothing runs): no weights are read
    assert a100.step_seconds(0, 0, 0, 0, 2, 16) == pytest.approx(0.002 + a100.swap_seconds(2, 16))


def test_one_request_by_hand(a100):
    """Prompt 10, answer 3, alone on the step clock: a prefill step that emits the first token,
    then two decode steps attending to 12 and 13 tokens."""
    w = Workload("one", (Request(1, 10, 3, 0),), 8)
    res = simulate(w, PagedAllocator(64, 4), record_snapshots=False)
    t = price(res, a100)
    step0 = max((2 * P * 10 + 4 * 40 * 40 * 128 * 55) / FLOPS, (W + KV * 10) / HBM) + 0.002
    step1 = max((2 * P + 4 * 40 * 40 * 128 * 12) / FLOPS, (W + KV * (12 + 1)) / HBM) + 0.002
    step2 = max((2 * P + 4 * 40 * 40 * 128 * 13) / FLOPS, (W + KV * (13 + 1)) / HBM) + 0.002
    r = t.requests
    assert r["ttft_s"][0] == pytest.approx(step0)
    assert r["e2e_s"][0] == pytest.approx(step0 + step1 + step2)
    assert r["tpot_s"][0] == pytest.approx((step1 + step2) / 2)
    assert t.summary["normalized_latency_s_per_token"] == pytest.approx((step0 + step1 + step2) / 3, rel=1e-5)
    assert t.summary["throughput_tokens_per_s"] == pytest.approx(3 / (step0 + step1 + step2), rel=1e-5)


@pytest.mark.parametrize("key", sorted(acc.PRESETS))
def test_kv_bytes_per_token_is_the_capacity_pages(key):
    """The cost model reads the same ModelConfig, through the same function, as the Capacity page."""
    m = acc.PRESETS[key]
    same = acc.kv_bytes_per_token(m.layers, m.kv_heads, m.head_dim, m.bytes_per_element)
    assert m.bytes_per_token == same
    if key in TIMED_MODELS:
        assert kv_bytes(timed_model(key), 1) == same
        cost = cost_model("h200", key)
        # the pool is the Capacity page's subtraction, then a floor division by that same figure
        reserve = int(cost.memory_bytes * 0.1)
        free = acc.kv_pool_bytes(cost.memory_bytes, weight_bytes(m), reserve)
        assert cost.pool_slots() == free // same


def test_pool_of_the_papers_setup(a100):
    # 40 GiB - 25,706,946,560 bytes of weights - 10 % (4 GiB) = 12,947,759,104 bytes = 15,805 slots
    assert a100.kv_pool_bytes() == 40 * 2**30 - W - 4 * 2**30 == 12_947_759_104
    assert a100.pool_slots() == 12_947_759_104 // KV == 15_805


def test_presets_cite_their_source():
    for gpu in GPUS.values():
        assert "datasheet" in gpu.source or "whitepaper" in gpu.source, gpu.key
        assert gpu.peak_flops > 0 and gpu.hbm_bytes_per_s > 0 and gpu.host_link_bytes_per_s > 0
    assert {"a100-40gb", "h100-sxm", "h200", "l4", "rtx-4090"} <= set(GPUS)
    assert {"opt-13b", "7b-fp16", "llama3-8b", "llama3-70b"} <= set(TIMED_MODELS)


def test_tensor_parallel_and_what_does_not_fit():
    # Llama 3 70B: 70,553,706,496 x 2 = 141.1e9 bytes (131.4 GiB) of weights. 2 x 40 GiB x 0.9 = 72 GiB
    # is too little; 4 x 40 GiB x 0.9 = 144 GiB leaves 12.6 GiB >= 8,192 tokens x 320 KiB = 2.5 GiB.
    assert min_gpus(gpu_preset("a100-40gb"), timed_model("llama3-70b")) == 4
    four = cost_model("a100-40gb", "llama3-70b")
    assert four.gpus == 4 and four.peak_flops == 4 * 312e12 and four.hbm_bytes_per_s == 4 * 1.555e12
    assert "4 x NVIDIA A100 40GB" in four.label
    with pytest.raises(FieldError) as err:
        cost_model("a100-40gb", "llama3-70b", gpus=1).pool_slots()
    assert err.value.field == "gpus" and "leave no room" in str(err.value)
    for bad, field in ((lambda: cost_model("tpu"), "gpu"), (lambda: cost_model(model="gpt-9"), "model"),
                       (lambda: cost_model(gpus=3), "gpus"),
                       (lambda: CostModel(gpu_preset("l4"), timed_model("opt-13b"), overhead_s=-1), "overhead_s")):
        with pytest.raises(FieldError) as err:
            bad()
        assert err.value.field == field


RUNS = [Scenario(), Scenario(preemption="swap"), Scenario(block_size=1, preemption="swap"),
        Scenario(arrival="trickle", arrival_rate=0.05), Scenario(workload="azure-conv")]


@pytest.mark.parametrize("sc", RUNS, ids=["default", "swap", "swap-1", "trickle", "azure"])
def test_run_time_is_the_sum_of_its_step_times_and_ttft_within_e2e(sc, a100):
    for res in run_scenario(sc, record_snapshots=False).values():
        t = price(res, a100, idle_step_s=1 / sc.steps_per_second)
        terms = t.terms
        # every busy record: the roofline of its terms; every idle one: its span at the arrival clock
        busy = (res.metrics["running"] > 0) | (res.metrics["waiting"] > 0)
        roof = np.maximum(terms["compute_s"], terms["memory_s"]) + terms["overhead_s"] + terms["swap_s"]
        assert np.allclose(t.seconds[busy], roof[busy])
        assert np.allclose(t.seconds[~busy], res.metrics["span"][~busy] / sc.steps_per_second)
        assert t.summary["makespan_s"] == pytest.approx(float(t.seconds.sum()))
        r = t.requests
        assert len(r["id"]) == res.summary["finished"]
        assert (r["ttft_s"] > 0).all() and (r["ttft_s"] <= r["e2e_s"]).all()
        assert (r["finish_s"] <= t.summary["makespan_s"] + 1e-9).all()


def test_swap_against_recompute_by_block_size(a100):
    """Acceptance: swap is slower than recompute at block size 1. At 256 the model does NOT make
    swap faster in the default scenario, and this is why:

    * at block 1 every swapped token is 80 host copies (K and V per layer) of 5 us each: 16,404
      blocks moved cost ~7 s, about ten times the FLOP time of recomputing the tokens instead;
    * at block 256 a swap is 2 blocks or so, but they are 256-slot blocks of sequences holding
      ~100-300 tokens (the 2,048-slot pool has only 8 blocks), so most of the 6.7 GB copied is
      empty slots; and recompute's prefill runs in steps that are memory-bound anyway (decode
      must read 25.7 GB of weights each step), so its FLOPs mostly hide under the weight reads.
    The swap penalty therefore shrinks ~30-fold from block 1 to 256 but does not change sign.
    """
    t = {}
    for bs in (1, 256):
        for mode in ("recompute", "swap"):
            res = run_scenario(Scenario(block_size=bs, preemption=mode), record_snapshots=False)["paged"]
            t[bs, mode] = price(res, a100).summary
    assert t[1, "swap"]["makespan_s"] > t[1, "recompute"]["makespan_s"] + 5.0
    assert t[1, "swap"]["swap_s"] > 8 * t[1, "recompute"]["recompute_flops_s"]
    penalty = {bs: t[bs, "swap"]["makespan_s"] - t[bs, "recompute"]["makespan_s"] for bs in (1, 256)}
    assert 0 < penalty[256] < penalty[1] / 20
    assert t[256, "swap"]["swap_s"] < 1.5 * t[256, "recompute"]["recompute_flops_s"]
    # swap and recompute now differ in throughput (they ran the same steps)
    assert t[1, "swap"]["throughput_tokens_per_s"] < t[1, "recompute"]["throughput_tokens_per_s"]


def test_seconds_clock_engine(a100):
    """On the seconds clock: arrivals wait for the clock, an idle gap is one record lasting until
    the next arrival, and the engine's own step durations are the cost model's."""
    w = Workload("two", (Request(1, 100, 5, 0, 0.0), Request(2, 50, 4, 0, 10.0)), 8)
    res = simulate(w, PagedAllocator(1024, 16), record_snapshots=False, clock=a100.for_blocks(16))
    t = price(res, a100)
    m = res.metrics
    idle = (m["running"] == 0) & (m["waiting"] == 0)
    assert idle.sum() == 1 and (m["span"] == 1).all()
    assert t.start_s[np.flatnonzero(idle)[0] + 1] == pytest.approx(10.0)
    assert np.allclose(t.seconds[~idle], breakdown(res, a100)["seconds"][~idle], rtol=1e-12)
    r = t.requests
    assert r["arrival_s"].tolist() == [0.0, 10.0]
    # request 2 finds an idle GPU: its first token is one prefill step after it arrived
    alone = a100.step_seconds(50, 50 * 51 // 2, 0, 0, 0)
    assert r["ttft_s"][1] == pytest.approx(alone)
    assert t.summary["makespan_s"] == pytest.approx(float(m["seconds"].sum()))
    with pytest.raises(FieldError) as err:
        simulate(Workload("steps", (Request(1, 10, 2, 3),), 8), PagedAllocator(64, 16), clock=a100.for_blocks(16))
    assert err.value.field == "seconds_per_step"
    res = simulate(Workload("steps", (Request(1, 10, 2, 3),), 8), PagedAllocator(64, 16),
                   clock=a100.for_blocks(16), seconds_per_step=0.5)
    assert res.requests["arrival_s"].tolist() == [1.5]


def test_reservation_runs_are_priced_too(a100):
    res = simulate(Workload("two", (Request(1, 100, 5), Request(2, 50, 4)), 8), ReserveMaxAllocator(256, 8),
                   record_snapshots=False)
    t = price(res, a100)
    assert t.summary["swap_s"] == 0 and t.summary["finished"] == 2
    assert t.summary["makespan_s"] == pytest.approx(float(t.seconds.sum())) == pytest.approx(t.makespan_s)


def test_one_roofline_prices_both_the_engine_step_and_the_breakdown(a100):
    """The roofline is written once (``CostModel.roofline``): the seconds the engine ran each step
    on and :func:`breakdown`'s seconds for the same records are the same floats, not merely close;
    and the terms match the hand formula of the module docstring."""
    w = Workload("six", tuple(Request(i, 30, 40, 0, 0.02 * i) for i in range(1, 7)), 48)    # 6 x 70 tokens, 128 slots
    res = simulate(w, PagedAllocator(128, 16, preemption="swap"), record_snapshots=False, clock=a100.for_blocks(16))
    m, terms = res.metrics, breakdown(res, a100)
    one_step = ((m["running"] > 0) | (m["waiting"] > 0)) & (m["span"] == 1)
    assert one_step.sum() >= 100 and (m["swapped_blocks"][one_step] > 0).sum() >= 5      # swap steps too
    assert np.array_equal(m["seconds"][one_step], terms["seconds"][one_step])
    compute, memory = a100.roofline(4, 4000, 4000)                    # 4 decode tokens reading 4,000
    assert compute == pytest.approx((2 * P * 4 + 4 * 40 * 40 * 128 * 4000) / FLOPS, rel=1e-12)
    assert memory == pytest.approx((W + KV * 4004) / HBM, rel=1e-12)
    assert a100.roofline(0, 0, 0) == (0.0, 0.0)                       # no token: no weights read
    arrays = a100.roofline(np.array([4.0, 0.0]), np.array([4000.0, 0.0]), np.array([4000, 0]))
    assert arrays[0].tolist() == [compute, 0.0] and arrays[1].tolist() == [memory, 0.0]
