"""Issue 37: the profile-driven step cost (allocator/cost/profile.py), the roofline calibrated on
microbenchmarks (allocator/cost/microbench.py), and replay-vllm --cost-model."""
import gzip
import json
import os
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest

from allocator.__main__ import main
from allocator.common.errors import FieldError
from allocator.cost.calibration import REPLAY_GPUS, REPLAY_MODELS
from allocator.cost.microbench import efficiency_from_profile, measured_shares, operator_errors, roofline_from_profiles
from allocator.cost.profile import (ALLREDUCE_LATENCY_S, ENGINE_OVERHEAD_S, PROFILE_ROOT, ProfileCost, ProfileGridWarning, bundles, interpolate_1d, load_bundle)
from allocator.studies.vllm_replay import best_cost_model, replay
from allocator.workloads.vllm_run import SHIPPED_RUN, load_run

PRO, R4090 = REPLAY_GPUS["rtx-pro-6000"], REPLAY_GPUS["rtx-4090"]
LLAMA, QWEN = REPLAY_MODELS["llama-3.1-8b"], REPLAY_MODELS["qwen3-32b"]
LAYER_OPS = ("layernorm", "qkv_proj", "rotary_emb", "o_proj", "gate_up_proj", "act_fn", "down_proj")


# ---------------------------------------------------------------- a tiny hand-built bundle

def tiny_bundle(tmp_path, *, drop_op=None, tp_degrees=(1, 2)):
    """A llama bundle with dense ops linear in tokens (op i: i + tokens/100 us on 1..64 tokens),
    per-sequence ops on 1..8 sequences and a small attention grid."""
    root = tmp_path / "TINY" / "meta-llama" / "Llama-3.1-8B" / "bf16"
    root.mkdir(parents=True)
    (root / "meta.yaml").write_text("gpu: NVIDIA RTX PRO 6000 Blackwell Server Edition\nhardware: RTXPRO6000\n"
                                    "architecture: llama\nmodel: meta-llama/Llama-3.1-8B\nvariant: bf16\n"
                                    f"tp_degrees: [{', '.join(map(str, tp_degrees))}]\nvllm_version: 0.19.0\n"
                                    "engine_effective:\n  block_size: 16\n")
    for tp in tp_degrees:
        d = root / f"tp{tp}"
        d.mkdir()
        rows = [(op, t, (i + 1) + t / 100) for i, op in enumerate(LAYER_OPS + ("embedding", "final_layernorm"))
                if op != drop_op for t in (1, 2, 4, 16, 64)]
        pd.DataFrame(rows, columns=["layer", "tokens", "time_us"]).to_csv(d / "dense.csv", index=False)
        pd.DataFrame([(op, s, base + s) for op, base in (("lm_head", 100.0), ("sampler", 10.0)) for s in (1, 2, 4, 8)],
                     columns=["layer", "sequences", "time_us"]).to_csv(d / "per_sequence.csv", index=False)
        att = []
        for pc in (0, 16, 32):
            for nd in (0, 1, 2, 4):
                for kp in ((0,) if pc == 0 else (0, 16, 32)):
                    for kd in ((0,) if nd == 0 else (16, 32, 64)):
                        if pc == 0 and nd == 0:
                            continue
                        att.append((pc, kp, nd, kd, 5 + 0.1 * pc + 0.01 * pc * kp + 0.02 * nd * kd))
        pd.DataFrame(att, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]).to_csv(
            d / "attention.csv", index=False)
    return str(root)


def test_lookup_is_exact_at_grid_points_linear_between_and_warned_beyond(tmp_path):
    c = ProfileCost(PRO, LLAMA, 1, bundle=tiny_bundle(tmp_path))
    L = LLAMA.config.layers
    per_layer = sum((i + 1) for i, op in enumerate(LAYER_OPS)) + 1      # layernorm runs twice: +1 us
    once = 8 + 9

    def dense_us(t):   # every op is i + t/100 us: the layer ops x L (layernorm twice) + the two once-a-step ops
        return L * (per_layer + 8 * t / 100) + once + 2 * t / 100

    for t in (1, 4, 64):                                   # exact at grid points
        assert c.dense_seconds(t) == pytest.approx(dense_us(t) * 1e-6, rel=1e-12)
    assert c.dense_seconds(10) == pytest.approx(dense_us(10) * 1e-6, rel=1e-12)    # linear between 4 and 16
    assert c.off_grid == {}
    with pytest.warns(ProfileGridWarning, match="tokens = 128 is above the profiled dense grid"):
        assert c.dense_seconds(128) == pytest.approx(dense_us(128) * 1e-6, rel=1e-12)   # the line continues
    assert c.off_grid == {("tokens", "above"): 1}
    # per-sequence: exact, linear, and extrapolated with a warning
    assert c.per_sequence_seconds(4) == pytest.approx((104 + 14) * 1e-6)
    assert c.per_sequence_seconds(6) == pytest.approx((106 + 16) * 1e-6)
    with pytest.warns(ProfileGridWarning, match="sequences = 16"):
        assert c.per_sequence_seconds(16) == pytest.approx((116 + 26) * 1e-6)


def test_attention_grid_exact_linear_and_off_grid(tmp_path):
    b = load_bundle(tiny_bundle(tmp_path), 1)
    f = lambda pc, kp, nd, kd: (5 + 0.1 * pc + 0.01 * pc * kp + 0.02 * nd * kd) * 1e-6
    a = b.attention
    for q in ((16, 32, 2, 64), (0, 0, 4, 16), (32, 0, 0, 0), (16, 16, 1, 32)):
        v, off = a.lookup(*q)
        assert v == pytest.approx(f(*q), rel=1e-12) and off == []
    # linear in each axis between grid points (the function is bilinear, so interpolation is exact)
    v, off = a.lookup(24, 24, 3, 48)
    assert v == pytest.approx(f(24, 24, 3, 48), rel=1e-12) and off == []
    assert a.lookup(0, 0, 0, 0) == (0.0, [])                              # no attention: 0 s
    v, off = a.lookup(16, 0, 8, 64)                                       # n_decode beyond 4
    assert ("n_decode", "above", 8.0) in off and v == pytest.approx(f(16, 0, 8, 64), rel=1e-12)
    v, off = a.lookup(0, 0, 2, 8)                                         # kv_decode below 16: held
    assert off == [("kv_decode", "below", 8.0)] and v == pytest.approx(f(0, 0, 2, 16))
    assert interpolate_1d(np.array([1.0, 3.0]), np.array([10.0, 30.0]), 2.0) == (20.0, None)


def test_allreduce_and_overhead_terms_against_their_formulas(tmp_path):
    root = tiny_bundle(tmp_path)
    one, two = ProfileCost(PRO, LLAMA, 1, bundle=root), ProfileCost(PRO, LLAMA, 2, bundle=root)
    L, h = LLAMA.config.layers, LLAMA.config.hidden_size
    assert one.allreduce_seconds(1000) == 0.0 and two.allreduce_seconds(0) == 0.0
    # 2 per layer, each T x hidden x 2 bytes, ring moves 2(p-1)/p = 1 of them at p = 2, over 64 GB/s PCIe 5.0
    expected = 2 * L * (ALLREDUCE_LATENCY_S + 1.0 * 1000 * h * 2 / 64e9)
    assert two.allreduce_seconds(1000) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(2 * 32 * (16.1e-6 + 8_192_000 / 64e9), rel=1e-12)
    four = 2.0 * 3 / 4     # the ring share at p = 4 (formula, no bundle needed)
    assert four == 1.5
    assert ENGINE_OVERHEAD_S == 1e-3
    t = one.step_terms(0, 0, 4, 4 * 32)
    assert t["overhead_s"] == 1e-3 and t["allreduce_s"] == 0.0
    assert t["seconds"] == pytest.approx(sum(v for k, v in t.items() if k != "seconds"))
    assert two.step_terms(0, 0, 4, 4 * 32)["allreduce_s"] == pytest.approx(two.allreduce_seconds(4))
    assert one.step_terms(0, 0, 0, 0)["seconds"] == 0.0
    # the composition from the engine's totals: one chunk of 16 over 32 cached, 2 decodes at mean 40
    assert ProfileCost.composition(16, 16 * 32 + 16 * 17 // 2, 2, 80) == (16.0, 32.0, 2.0, 40.0, 3.0)


def test_refusals_name_what_is_missing(tmp_path):
    with pytest.raises(FieldError, match=r"no operator profile of Llama 3\.1 8B \(bf16\) on NVIDIA L4 24GB .*"
                                         r"LLMServingSim's profiler .* or use --cost-model roofline"):
        ProfileCost(REPLAY_GPUS["l4"], LLAMA)
    with pytest.raises(FieldError, match="tensor_parallel_size = 2 was not profiled .* holds tensor parallel 1"):
        ProfileCost(R4090, LLAMA, 2)
    with pytest.raises(FieldError, match="dense.csv lacks operator 'rotary_emb', which a llama step runs"):
        ProfileCost(PRO, LLAMA, 1, bundle=tiny_bundle(tmp_path / "a", drop_op="rotary_emb"))
    with pytest.raises(FieldError, match="profiles meta-llama/Llama-3.1-8B, not Qwen3 32B"):
        ProfileCost(PRO, QWEN, 1, bundle=tiny_bundle(tmp_path / "b"))
    root = tiny_bundle(tmp_path / "c")
    os.remove(os.path.join(root, "tp1", "attention.csv"))
    with pytest.raises(FieldError, match="attention.csv is missing from the bundle"):
        load_bundle(root, 1)


def test_every_shipped_bundle_returns_its_own_operators():
    found = bundles(PROFILE_ROOT)
    assert [os.path.relpath(p, PROFILE_ROOT) for p, _ in found] == [
        "RTX4090/meta-llama/Llama-3.1-8B/bf16", "RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16",
        "RTXPRO6000/Qwen/Qwen3-32B/bf16", "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16"]
    assert os.path.isfile(os.path.join(PROFILE_ROOT, "LICENSE-MIT"))
    checked = moe_points = 0
    for path, meta in found:
        for tp in meta["tp_degrees"]:
            b = load_bundle(path, tp)
            for table in (b.dense, b.per_sequence):
                for op, (keys, vals) in table.items():
                    got = [interpolate_1d(keys, vals, k) for k in keys]
                    assert [g[1] for g in got] == [None] * len(keys)
                    assert np.allclose([g[0] for g in got], vals, rtol=0, atol=1e-15)
            rows = b.rows["attention"].sample(400, random_state=tp) if len(b.rows["attention"]) > 400 else b.rows["attention"]
            for r in rows.itertuples():
                v, off = b.attention.lookup(r.prefill_chunk, r.kv_prefill, r.n_decode, r.kv_decode)
                assert off == [] and v == pytest.approx(r.time_us * 1e-6, rel=1e-12, abs=1e-15)
            if "moe" in b.rows:                                   # the expert block, every measured point
                for r in b.rows["moe"].itertuples():
                    v, off = b.experts.lookup(r.tokens, r.activated_experts)
                    assert off == [] and v == pytest.approx(r.time_us * 1e-6, rel=1e-12)
                    moe_points += 1
            checked += 1
    assert checked == 7 and moe_points == 50                      # the MoE bundle's tp1 only holds moe.csv
    # the raw files: gzip of the profiler's CSVs, times in microseconds
    with gzip.open(os.path.join(found[3][0], "tp1", "dense.csv.gz"), "rt") as fh:
        assert fh.readline().strip() == "layer,tokens,time_us"


def test_a_step_on_the_shipped_bundle_adds_up():
    c = ProfileCost(PRO, LLAMA, 1)
    b = c.bundle
    d = {op: dict(zip(k, v)) for op, (k, v) in b.dense.items()}
    p = {op: dict(zip(k, v)) for op, (k, v) in b.per_sequence.items()}
    t = c.step_terms(0, 0, 64, 64 * 512)                                  # 64 decodes over 512 tokens
    dense = 32 * (2 * d["layernorm"][64] + sum(d[o][64] for o in LAYER_OPS if o != "layernorm")) \
        + d["embedding"][64] + d["final_layernorm"][64]
    assert t["dense_s"] == pytest.approx(dense, rel=1e-12)
    a = b.rows["attention"]
    row = a[(a.prefill_chunk == 0) & (a.n_decode == 64) & (a.kv_decode == 512)]
    assert t["attention_s"] == pytest.approx(32 * float(row.time_us.iloc[0]) * 1e-6, rel=1e-12)
    assert t["per_sequence_s"] == pytest.approx(p["lm_head"][64] + p["sampler"][64], rel=1e-12)
    assert t["seconds"] == pytest.approx(dense + t["attention_s"] + t["per_sequence_s"] + 1e-3, rel=1e-12)


# ---------------------------------------------------------------- the replay

@pytest.fixture(scope="module")
def shipped():
    return load_run(SHIPPED_RUN)


def test_replay_of_the_shipped_run_with_the_profile_model(shipped, capsys):
    assert best_cost_model(shipped) == "profile"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProfileGridWarning)                 # the shipped run stays on the grid
        rep = replay(shipped, cost_model="profile")
    assert rep.cost_model == "profile" and rep.cost.off_grid == {} and rep.preemptions == 0
    errs = {k: rep.error_pct(k) for k in ("ttft", "tpot", "latency")}
    with capsys.disabled():
        print("\nshipped run, profile model, mean error %:", {k: round(v, 2) for k, v in errs.items()})
    for k, v in errs.items():
        assert abs(v) <= 5.0, (k, v)
    assert [round(v, 1) for v in errs.values()] == [-0.9, 0.2, -0.1]
    assert rep.table["tpot"]["mean"]["simulated"] == pytest.approx(0.03252, abs=2e-5)
    j = rep.to_json()
    assert j["cost_model"] == "profile" and j["profile"]["overhead_s"] == 1e-3 and "efficiency" not in j


def test_cli_cost_model_option_and_json_of_both(shipped, capsys):
    assert main(["replay-vllm", SHIPPED_RUN, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_model"] == "profile"                                  # the best available by default
    assert set(out["cost_models"]) == {"roofline", "profile", "roofline_fitted_on_run"}
    # each cost model's table is the replay's own (no figure is typed in here)
    for name, kw in (("roofline", {}), ("profile", {}), ("roofline_fitted_on_run", {"calibration": "run"})):
        cm = "roofline" if name.startswith("roofline") else name
        assert out["cost_models"][name]["table"] == replay(shipped, cost_model=cm, **kw).table
    assert out["cost_models"]["roofline"]["efficiency_source"].startswith("operator microbenchmarks")
    for t in (out["cost_models"][m]["table"] for m in ("roofline", "profile", "roofline_fitted_on_run")):
        assert set(t) == {"ttft", "tpot", "latency"} and set(t["tpot"]) == {"mean", "p50", "p90"}
    assert main(["replay-vllm", SHIPPED_RUN, "--cost-model", "roofline"]) == 0
    text = capsys.readouterr().out
    assert "cost model: roofline" in text and "simulated (roofline)" in text
    assert main(["replay-vllm", SHIPPED_RUN, "--cost-model", "profile", "--gpu", "l4"]) == 2
    assert "no operator profile of Llama 3.1 8B (bf16) on NVIDIA L4 24GB" in capsys.readouterr().err


def test_mismatched_override_and_unpriceable_runs_are_refused(shipped, tmp_path, capsys):
    assert main(["replay-vllm", SHIPPED_RUN, "--model", "qwen3-32b"]) == 2
    err = capsys.readouterr().err
    assert "--model 'qwen3-32b' does not match the run's model 'meta-llama/Llama-3.1-8B'" in err
    assert err.count("\n") == 1
    d = tmp_path / "rtxpro6000_moe"
    shutil.copytree(SHIPPED_RUN, d)
    meta = json.loads((d / "meta.json").read_text())
    meta["model"] = meta["engine_kwargs"]["model"] = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    meta["engine_kwargs"].update(data_parallel_size=2, enable_expert_parallel=False)
    (d / "meta.json").write_text(json.dumps(meta))
    assert main(["replay-vllm", str(d)]) == 2
    err = capsys.readouterr().err
    assert ("data_parallel_size = 2 without enable_expert_parallel, so vLLM shards each of Qwen3 30B-A3B bf16's "
            "experts over the 2 x tp GPUs") in err and err.count("\n") == 1


def test_roofline_calibrated_on_microbenchmarks():
    rows = {r["bundle"]: r for r in roofline_from_profiles()}
    assert len(rows) == 7
    pro = rows["RTXPRO6000/meta-llama/Llama-3.1-8B/bf16 tp1"]
    b = load_bundle(os.path.join(PROFILE_ROOT, "RTXPRO6000/meta-llama/Llama-3.1-8B/bf16"), 1)
    # by hand: the four GEMMs at 2048 tokens, 2 x params x tokens over their measured time
    d = {op: dict(zip(k, v)) for op, (k, v) in b.dense.items()}
    params = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 4096 * 2 * 14336 + 14336 * 4096
    share = 2 * params * 2048 / sum(d[o][2048.0] for o in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")) / 503.8e12
    assert measured_shares(b, PRO, LLAMA)[0] == pytest.approx(share, rel=1e-12)
    assert pro["efficiency"]["eta_flops"] == round(share, 4)
    assert 0.7 < pro["efficiency"]["eta_flops"] < 0.85 and 0.75 < pro["efficiency"]["eta_bw"] < 0.9
    e = efficiency_from_profile(b, PRO, LLAMA)
    errs = {o["operator"]: o for o in operator_errors(b, PRO, LLAMA, e)}
    assert set(errs) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention"}
    # the big GEMM is within 10 % at its median; the roofline misses small attention kernels badly
    assert abs(errs["gate_up_proj"]["median_error_pct"]) < 10 and errs["attention"]["median_error_pct"] < -50
    # the RTX 4090's GEMMs beat the preset's 165.2 TFLOP/s: reported uncapped, capped in the efficiency
    r4 = rows["RTX4090/meta-llama/Llama-3.1-8B/bf16 tp1"]
    assert r4["measured_share"]["flops"] > 1.0 and r4["efficiency"]["eta_flops"] == 1.0


def test_page_table_and_sentence_name_each_cost_model(shipped):
    from allocator.studies.vllm_replay import compare_cost_models
    from allocator.viz.replay import COST_MODEL_LABELS, cost_model_sentence, cost_model_table, signed_pct

    reps = compare_cost_models(shipped)
    t = cost_model_table(reps)
    for name, label in COST_MODEL_LABELS.items():
        assert t[f"{label}: error"].tolist()[0] == signed_pct(reps[name].error_pct("ttft"))
    r, p = reps["roofline"], reps["profile"]
    assert r.efficiency_source == "operator microbenchmarks (RTXPRO6000/meta-llama/Llama-3.1-8B/bf16 tp1)"
    fitted = replay(shipped, calibration="run")
    s = cost_model_sentence(reps, fitted)

    def three(x):
        return ", ".join(signed_pct(x.error_pct(k)) for k in ("ttft", "tpot")) + f" and {signed_pct(x.error_pct('latency'))}"
    assert f"operator microbenchmarks by {three(r)}; the operator profile" in s
    assert f"(per-operator latencies measured on one decoder layer, a 1 ms engine overhead assumed) by {three(p)}." in s
    assert f"The roofline fitted on this very run (above) lands at {three(fitted)}" in s
    # one measured run ships: transfer to another GPU or model is said to be untested, never claimed
    assert s.endswith("Neither was fitted on this run. How either carries to another GPU or model is untested "
                      "here: only one measured run ships with the lab.")
    assert "is the model that carries" not in s
    up = cost_model_sentence(reps, uploaded=True)
    assert up.endswith("These errors are measured on the uploaded run itself; they say nothing about runs the lab "
                       "has not seen.") and "untested here" not in up
    # the roofline that never saw the run is the worse of the two here, and the sentence does not hide it
    assert abs(r.error_pct("ttft")) > abs(p.error_pct("ttft"))
