"""Issue 37, item 3: mixture-of-experts steps, expert parallelism and data parallelism priced
(allocator/cost/calibration.py, allocator/cost/profile.py, allocator/studies/vllm_replay.py), on
hand-built cases whose answers are worked out here from the formulas."""
import json
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from allocator.__main__ import main
from allocator.common.errors import FieldError
from allocator.cost.calibration import CALIBRATED, REPLAY_GPUS, REPLAY_MODELS, CalibratedCost
from allocator.cost.profile import ALLREDUCE_LATENCY_S, ExpertTable, ProfileCost, ProfileGridWarning, load_bundle
from allocator.studies.vllm_replay import assign_ranks, replay
from allocator.workloads.vllm_run import SHIPPED_RUN, load_run

PRO = REPLAY_GPUS["rtx-pro-6000"]
MOE, LLAMA = REPLAY_MODELS["qwen3-30b-a3b"], REPLAY_MODELS["llama-3.1-8b"]
MOE_LAYER_OPS = ("layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj")


# ---------------------------------------------------------------- the model's experts

def test_total_and_active_parameters_from_the_config():
    h, e, k, L = 2048, 128, 8, 48
    expert = 3 * h * 768                                      # gate, up, down of one expert
    attention = h * (32 * 128) + 2 * h * (4 * 128) + (32 * 128) * h + 2 * 128 + 2 * h
    per_layer = attention + h * e + e * expert                # + the router
    total = 2 * 151_936 * h + h + L * per_layer               # untied embedding and lm_head, final norm
    assert MOE.config.params == total == 30_532_122_624
    assert MOE.expert_params == expert
    assert MOE.active_params == total - L * (e - k) * expert == 3_353_032_704
    assert LLAMA.active_params == LLAMA.config.params and not LLAMA.is_moe


def test_expected_distinct_experts_under_uniform_routing():
    # 1 - (1 - 8/128)^T of 128 experts: one token activates its 8, two tokens 15.5 on average
    assert MOE.expected_experts(1) == pytest.approx(8.0)
    assert MOE.expected_experts(2) == pytest.approx(128 * (1 - (15 / 16) ** 2)) == pytest.approx(15.5)
    assert MOE.expected_experts(2, group=2) == pytest.approx(7.75)          # half of them on each of 2 GPUs
    t = np.array([0, 1, 4, 64, 4096])
    got = MOE.expected_experts(t)
    assert np.all(got <= np.minimum(8 * t, 128) + 1e-9) and got[-1] == pytest.approx(128)
    assert LLAMA.expected_experts(100) == 0.0


# ---------------------------------------------------------------- a hand-built MoE bundle

def moe_bundle(tmp_path, *, with_moe=True):
    """A qwen3_moe bundle: dense ops i + tokens/100 us on 1..64 tokens, the expert block
    10 + tokens/10 + 2 x experts us on a triangle grid, a small attention grid."""
    root = tmp_path / "TINY" / "Qwen" / "Qwen3-30B-A3B-Instruct-2507" / "bf16"
    d = root / "tp1"
    d.mkdir(parents=True)
    (root / "meta.yaml").write_text("hardware: RTXPRO6000\narchitecture: qwen3_moe\n"
                                    "model: Qwen/Qwen3-30B-A3B-Instruct-2507\nvariant: bf16\ntp_degrees: [1]\n")
    rows = [(op, t, (i + 1) + t / 100) for i, op in enumerate(MOE_LAYER_OPS + ("embedding", "final_layernorm"))
            for t in (1, 2, 4, 16, 64)]
    pd.DataFrame(rows, columns=["layer", "tokens", "time_us"]).to_csv(d / "dense.csv", index=False)
    pd.DataFrame([(op, s, base + s) for op, base in (("lm_head", 100.0), ("sampler", 10.0)) for s in (1, 2, 4, 8)],
                 columns=["layer", "sequences", "time_us"]).to_csv(d / "per_sequence.csv", index=False)
    att = [(0, 0, nd, kd, 5 + 0.02 * nd * kd) for nd in (1, 2, 4) for kd in (16, 32, 64)]
    pd.DataFrame(att, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]).to_csv(
        d / "attention.csv", index=False)
    if with_moe:
        moe = [(t, a, 10 + t / 10 + 2 * a) for t in (1, 2, 4, 8, 16, 32, 64) for a in (8, 16, 32, 64, 128)
               if a <= 8 * t]
        pd.DataFrame(moe, columns=["tokens", "activated_experts", "time_us"]).to_csv(d / "moe.csv", index=False)
    return str(root)


def table_us(t, a):
    return 10 + t / 10 + 2 * a


def test_expert_table_exact_linear_and_warned(tmp_path):
    b = load_bundle(moe_bundle(tmp_path), 1)
    assert isinstance(b.experts, ExpertTable)
    assert b.experts.lookup(4, 32) == (pytest.approx(table_us(4, 32) * 1e-6, rel=1e-12), [])
    # between rows 4 and 8 and between 16 and 32 experts: the plane through them
    v, off = b.experts.lookup(6, 24)
    assert off == [] and v == pytest.approx(table_us(6, 24) * 1e-6, rel=1e-12)
    # 3 tokens, 20 experts: above row 2's largest (16) but inside row 4's: extended, not warned
    v, off = b.experts.lookup(3, 20)
    assert off == [] and v == pytest.approx(table_us(3, 20) * 1e-6, rel=1e-12)
    # beyond the measured tokens: the line through the last two rows, reported
    v, off = b.experts.lookup(128, 128)
    assert off == [("tokens", "above", 128.0)] and v == pytest.approx(table_us(128, 128) * 1e-6, rel=1e-12)
    v, off = b.experts.lookup(1, 4)
    assert off == [("activated_experts", "below", 4.0)] and v == pytest.approx(table_us(1, 8) * 1e-6)


def test_an_moe_step_against_its_formula(tmp_path):
    c = ProfileCost(PRO, MOE, 1, bundle=moe_bundle(tmp_path))
    L = 48
    t = c.step_terms(0, 0, 4, 4 * 32)                        # 4 decodes over 32 tokens each
    a = 128 * (1 - (15 / 16) ** 4)                           # experts 4 tokens activate, uniform routing
    assert c.expert_coordinates(4) == (4.0, pytest.approx(a))
    assert t["experts_s"] == pytest.approx(L * table_us(4, a) * 1e-6, rel=1e-12)
    # the dense operators are the attention half only (the expert block replaces gate_up/act/down)
    per_layer = sum((i + 1) + 4 / 100 for i in range(5)) + (1 + 4 / 100)      # layernorm runs twice
    once = (6 + 4 / 100) + (7 + 4 / 100)
    assert t["dense_s"] == pytest.approx((L * per_layer + once) * 1e-6, rel=1e-12)
    assert t["expert_parallel_s"] == 0.0 and t["allreduce_s"] == 0.0
    assert t["seconds"] == pytest.approx(sum(v for k, v in t.items() if k != "seconds"), rel=1e-12)


def test_the_expert_parallel_term_and_the_ranks_tokens(tmp_path):
    c = ProfileCost(PRO, MOE, 1, bundle=moe_bundle(tmp_path), dp=2, ep=True)
    L, h = 48, 2048
    assert c.ep_group == 2
    # dispatch + combine per layer: ring all-gather and reduce-scatter of dp x T x hidden x 2 bytes,
    # (P-1)/P = 1/2 of them over each GPU's PCIe 5.0 x16 (64 GB/s one way), plus the latency each
    T = 10
    expected = 2 * L * (ALLREDUCE_LATENCY_S + 0.5 * (2 * T) * h * 2 / 64e9)
    assert c.expert_parallel_seconds(T) == pytest.approx(expected, rel=1e-12)
    assert c.expert_parallel_seconds(0) == 0.0
    # each GPU holds 64 experts and sees both ranks' 20 tokens: 20 x 8 / 2 pairs, priced as 10 tokens
    assert c.expert_coordinates(T) == (10.0, pytest.approx(64 * (1 - (15 / 16) ** 20)))
    t = c.step_terms(0, 0, T, T * 32)
    assert t["expert_parallel_s"] == pytest.approx(expected, rel=1e-12)
    # the roofline's term is the same formula with its own latency constant
    r = CalibratedCost(PRO, MOE, 1, CALIBRATED, dp=2, ep=True)
    assert r.expert_parallel_seconds(T) == pytest.approx(2 * L * (10e-6 + 0.5 * 2 * T * h * 2 / 64e9), rel=1e-12)
    # and its weights: the shared ones plus the experts this GPU activates, each read once
    shared = (MOE.config.params - 128 * L * MOE.expert_params) * 2
    bw = CALIBRATED.eta_bw * PRO.hbm_bytes_per_s
    want = (shared + MOE.expected_experts(2 * T, 2) * L * MOE.expert_params * 2) / bw
    assert r.weights_seconds(T) == pytest.approx(want, rel=1e-12)


def test_moe_refusals_name_what_is_missing(tmp_path):
    with pytest.raises(FieldError, match=r"lacks moe\.csv \(tp1/moe\.csv\), the expert block every qwen3_moe layer"):
        ProfileCost(PRO, MOE, 1, bundle=moe_bundle(tmp_path / "a", with_moe=False))
    with pytest.raises(FieldError, match="profiles Qwen/Qwen3-30B-A3B-Instruct-2507, not Llama 3.1 8B bf16"):
        ProfileCost(PRO, LLAMA, 1, bundle=moe_bundle(tmp_path / "b"))
    dense = moe_bundle(tmp_path / "d")
    meta = os.path.join(dense, "meta.yaml")
    text = open(meta).read()
    open(meta, "w").write(text.replace("qwen3_moe", "qwen3"))
    with pytest.raises(FieldError, match="architecture 'qwen3', which is not a mixture of experts, but Qwen3 "
                                         "30B-A3B bf16 is"):
        ProfileCost(PRO, MOE, 1, bundle=dense)
    with pytest.raises(FieldError, match="without expert parallelism shards every expert"):
        ProfileCost(PRO, MOE, 1, bundle=moe_bundle(tmp_path / "c"), dp=2, ep=False)
    # the shipped bundle measured the expert block at tensor parallel 1 only
    with pytest.raises(FieldError, match=r"lacks moe\.csv \(tp2/moe\.csv\)"):
        ProfileCost(PRO, MOE, 2)


# ---------------------------------------------------------------- data parallelism

def test_requests_are_dealt_in_turn_before_any_snapshot():
    assert assign_ranks(np.arange(7) * 0.01, 3).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_assignment_follows_the_lowest_4_waiting_plus_running():
    arrivals = np.array([0.0, 0.05, 0.15, 0.17, 0.35])
    queue = np.array([0.0, 0.2, 0.0, 0.5, 0.0])
    run = np.array([1.0, 1.0, 0.1, 1.0, 1.0])
    # r0 -> 0 (tie: the first rank); r1 -> 1 (the front end counted r0 waiting on rank 0: 4 vs 0);
    # snapshot at 0.1: rank 0 runs r0 (score 1), rank 1 has r1 waiting (score 4) -> r2 to rank 0;
    # r3 in the same window: rank 0 now 1 + 4 (its own count) = 5 > 4 -> rank 1;
    # snapshot at 0.3: rank 0 runs r0 (r2 left at 0.25): 1; rank 1 runs r1 and has r3 waiting: 5 -> rank 0
    assert assign_ranks(arrivals, 2, (queue, run)).tolist() == [0, 1, 0, 1, 0]


def small_run(tmp_path, n=40, **engine):
    """The shipped run's first ``n`` requests, with ``engine`` merged into its engine_kwargs."""
    d = tmp_path / "rtxpro6000_small"
    d.mkdir(parents=True)
    meta = json.loads(open(os.path.join(SHIPPED_RUN, "meta.json")).read())
    meta["engine_kwargs"].update(engine)
    if "model" in engine:
        meta["model"] = engine["model"]
    (d / "meta.json").write_text(json.dumps(meta))
    lines = open(os.path.join(SHIPPED_RUN, "requests.jsonl")).read().splitlines()[:n]
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return str(d)


def test_a_data_parallel_replay_is_independent_ranks(tmp_path):
    run = load_run(small_run(tmp_path, data_parallel_size=2))
    rep = replay(run, cost_model="roofline")
    assert rep.data_parallel == 2 and not rep.expert_parallel and rep.dp_rounds >= 1
    per = np.bincount(rep.ranks, minlength=2)
    assert per.sum() == 40 and abs(int(per[0]) - int(per[1])) <= 4          # the rule balances them
    # rank 0's requests replayed alone, as a one-engine run, give the same per-request seconds
    one = tmp_path / "rank0"
    one.mkdir()
    meta = json.loads((tmp_path / "rtxpro6000_small" / "meta.json").read_text())
    meta["engine_kwargs"]["data_parallel_size"] = 1
    (one / "meta.json").write_text(json.dumps(meta))
    lines = open(os.path.join(SHIPPED_RUN, "requests.jsonl")).read().splitlines()[:40]
    keep = np.flatnonzero(rep.ranks == 0)
    (one / "requests.jsonl").write_text("\n".join(lines[i] for i in keep) + "\n")
    alone = replay(load_run(str(one)), gpu="rtx-pro-6000", cost_model="roofline")
    assert np.allclose(alone.simulated["ttft"], rep.simulated["ttft"][keep], rtol=1e-9, atol=1e-9)
    assert np.allclose(alone.simulated["latency"], rep.simulated["latency"][keep], rtol=1e-9, atol=1e-9)
    # and a different assignment would have given different seconds: the ranks matter
    assert not np.allclose(rep.simulated["ttft"], replay(load_run(small_run(tmp_path / "x")), cost_model="roofline")
                           .simulated["ttft"])


def test_an_moe_run_with_data_and_expert_parallelism_replays(tmp_path, capsys):
    d = small_run(tmp_path, model="Qwen/Qwen3-30B-A3B-Instruct-2507", data_parallel_size=2,
                  enable_expert_parallel=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileGridWarning)
        assert main(["replay-vllm", d, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_model"] == "profile" and out["data_parallel"] == 2 and out["expert_parallel"] is True
    assert out["profile"]["expert_parallel_gpus"] == 2 and sum(out["ranks"]["requests_per_rank"]) == 40
    # no bundle of this model was fitted on a run: its roofline comes from the microbenchmarks, and the
    # shipped run's fit is reported beside it
    assert set(out["cost_models"]) == {"roofline", "profile", "roofline_fitted_on_run"}
    assert out["cost_models"]["roofline"]["efficiency_source"] == (
        "operator microbenchmarks (RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16 tp1)")
    assert all("table" in v for v in out["cost_models"].values())
