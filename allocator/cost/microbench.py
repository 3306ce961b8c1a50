"""The roofline calibrated on operator microbenchmarks instead of on a serving run.

:data:`allocator.cost.calibration.CALIBRATED` fits the roofline's two efficiencies and its overhead on
the one shipped run -- the run it is then checked against. Here the efficiencies come from the
operator profiles (``assets/llm_profiles/``, casys-kaist/LLMServingSim ``profiler/perf/``, MIT
licence), one GPU at a time, with no serving run involved:

* ``eta_flops`` = the weight GEMMs' (``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``;
  the first two for a mixture of experts, whose MLP is the expert block) FLOPs at the largest
  profiled token count (2 x their parameters x tokens; compute-bound
  there) over their measured time, over the datasheet's peak dense bf16 FLOP/s;
* ``eta_bw`` = the KV bytes decode attention reads (``n_decode x kv_decode x 2 x kv_heads x
  head_dim x 2`` per layer and GPU) over its measured time, on the profile's pure-decode points
  that read at least :data:`MIN_DECODE_BYTES` (bandwidth-bound there), over the datasheet's
  memory bandwidth.

:func:`roofline_from_profiles` then prices every profiled GEMM and attention point with that
roofline (``max(flops / (eta_flops x peak), bytes / (eta_bw x bandwidth))``; bytes: a GEMM's
weights, attention's KV read and written) and reports its error against the measurement, per
operator (a mixture of experts' expert block too: ``2 x expert_params x k`` FLOPs a token, the
activated experts' weights read once). The small element-wise operators (norms, rotary, activation, embedding) are not in
the roofline at all; their measured time is what its fixed overhead has to stand for.

Units: seconds, FLOPs, bytes; errors in percent (roofline / measured - 1).
"""
from __future__ import annotations

import numpy as np

from allocator.common.errors import FieldError

from allocator.cost.calibration import REPLAY_GPUS, REPLAY_MODELS, Efficiency, ServedModel
from allocator.cost.profile import ENGINE_OVERHEAD_S, PROFILE_ROOT, ProfileBundle, gpu_matches, model_key, bundles, load_bundle
from allocator.cost.roofline import GPU

#: Pure-decode attention points reading fewer bytes than this (per layer and GPU) are left out
#: of eta_bw: below it launch latency, not bandwidth, sets the time.
MIN_DECODE_BYTES = 64 * 2**20
#: The weight GEMMs of a dense layer.
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def gemm_params(model: ServedModel, tp: int = 1) -> dict:
    """Parameters of each weight GEMM of one layer on one of ``tp`` GPUs (Megatron-LM split:
    column-parallel qkv and gate_up, row-parallel o and down)."""
    c = model.config
    q = c.heads * c.head_dim
    kv = c.kv_heads * c.head_dim
    return {"qkv_proj": c.hidden_size * (q + 2 * kv) // tp, "o_proj": q * c.hidden_size // tp,
            "gate_up_proj": c.hidden_size * 2 * model.intermediate_size // tp,
            "down_proj": model.intermediate_size * c.hidden_size // tp}


def _kv_bytes_per_token_layer(model: ServedModel, tp: int) -> float:
    c = model.config
    return 2 * c.kv_heads * c.head_dim * c.bytes_per_element / tp


def _gemms(bundle: ProfileBundle) -> tuple:
    """The weight GEMMs a bundle times in dense.csv (a mixture of experts has no gate_up_proj or
    down_proj there: its MLP is the expert block of moe.csv)."""
    return tuple(op for op in GEMMS if op in bundle.dense)


def measured_shares(bundle: ProfileBundle, gpu: GPU, model: ServedModel) -> tuple[float, float]:
    """(GEMM FLOP/s / peak FLOP/s, decode-attention bytes/s / bandwidth) as measured, uncapped (the
    module docstring's method). A share above 1 means the card beat its datasheet figure (the RTX
    4090's GEMMs measure 1.005 of the 165.2 TFLOP/s the preset states)."""
    tp = bundle.tp
    params = gemm_params(model, tp)
    flops = time = 0.0
    for op in _gemms(bundle):
        keys, vals = bundle.dense[op]
        flops += 2.0 * params[op] * keys[-1]
        time += vals[-1]
    eta_f = flops / time / gpu.peak_flops
    a = bundle.rows["attention"]
    dec = a[(a.prefill_chunk == 0) & (a.n_decode > 0)]
    read = dec.n_decode.to_numpy() * dec.kv_decode.to_numpy() * _kv_bytes_per_token_layer(model, tp)
    big = read >= MIN_DECODE_BYTES
    eta_b = read[big].sum() / (dec.time_us.to_numpy()[big].sum() * 1e-6) / gpu.hbm_bytes_per_s
    return float(eta_f), float(eta_b)


def efficiency_from_profile(bundle: ProfileBundle, gpu: GPU, model: ServedModel) -> Efficiency:
    """``eta_flops`` and ``eta_bw`` from one bundle's operators (:func:`measured_shares`, capped at 1
    and rounded to 4 places); the overhead is :data:`allocator.cost.profile.ENGINE_OVERHEAD_S`
    (profiles cannot hold one)."""
    f, b = measured_shares(bundle, gpu, model)
    return Efficiency(round(min(f, 1.0), 4), round(min(b, 1.0), 4), ENGINE_OVERHEAD_S)


def operator_errors(bundle: ProfileBundle, gpu: GPU, model: ServedModel, eff: Efficiency) -> list[dict]:
    """Roofline vs measured for every profiled GEMM point and attention point of one layer.

    Returns:
        [{"operator", "points", "median_error_pct", "worst_error_pct", "error_pct" (float [points])}]
    """
    tp, c = bundle.tp, model.config
    flops_s, bw = eff.eta_flops * gpu.peak_flops, eff.eta_bw * gpu.hbm_bytes_per_s
    out = []
    params = gemm_params(model, tp)
    for op in _gemms(bundle):
        keys, vals = bundle.dense[op]
        roof = np.maximum(2.0 * params[op] * keys / flops_s, params[op] * c.bytes_per_element / bw)
        out.append((op, roof / vals - 1))
    if bundle.experts is not None and model.is_moe:
        # the expert block: 2 x expert_params FLOPs per token-expert pair (k pairs a token), the
        # activated experts' weights read once each; the router's GEMM and the top-k are left out
        m = bundle.rows["moe"]
        tok, act = m.tokens.to_numpy(float), m.activated_experts.to_numpy(float)
        fl = 2.0 * model.expert_params * model.experts_per_token * tok / tp
        by = act * model.expert_params * c.bytes_per_element / tp
        out.append(("experts", np.maximum(fl / flops_s, by / bw) / (m.time_us.to_numpy() * 1e-6) - 1))
    a = bundle.rows["attention"]
    a = a[a.time_us > 0]
    pc, kp, nd, kd = (a[k].to_numpy(float) for k in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
    pairs = pc * kp + pc * (pc + 1) / 2 + nd * kd
    kvb = _kv_bytes_per_token_layer(model, tp)
    fl = 4.0 * (c.heads / tp) * c.head_dim * pairs
    by = kvb * (nd * kd + kp + pc + nd)
    roof = np.maximum(fl / flops_s, by / bw)
    out.append(("attention", roof / (a.time_us.to_numpy() * 1e-6) - 1))
    return [{"operator": op, "points": int(len(e)), "median_error_pct": float(100 * np.median(e)),
             "worst_error_pct": float(100 * e[np.argmax(np.abs(e))]), "error_pct": 100 * e} for op, e in out]


def roofline_from_profiles(root: str = PROFILE_ROOT) -> list[dict]:
    """For every bundle (and tensor-parallel folder) under ``root`` whose GPU and model the lab has
    presets for: {"bundle", "gpu", "model", "tp", "efficiency": {"eta_flops", "eta_bw", "overhead_s"},
    "measured_share": :func:`measured_shares` uncapped, "operators": :func:`operator_errors` without the
    per-point arrays}."""
    rows = []
    for path, meta in bundles(root):
        gpu = next((g for g in REPLAY_GPUS.values() if gpu_matches(g, meta.get("hardware", ""))), None)
        key = model_key(meta["model"])
        if gpu is None or key is None:
            continue
        model = REPLAY_MODELS[key]
        for tp in meta.get("tp_degrees", [1]):
            b = load_bundle(path, tp)
            e = efficiency_from_profile(b, gpu, model)
            raw = measured_shares(b, gpu, model)
            ops = [{k: v for k, v in o.items() if k != "error_pct"} for o in operator_errors(b, gpu, model, e)]
            rows.append({"bundle": b.name, "gpu": gpu.key, "model": key, "tp": tp,
                         "efficiency": {"eta_flops": e.eta_flops, "eta_bw": e.eta_bw, "overhead_s": e.overhead_s},
                         "measured_share": {"flops": raw[0], "bandwidth": raw[1]},
                         "operators": ops})
    return rows


def left_out_floor(bundle: ProfileBundle, model: ServedModel) -> tuple[float, float]:
    """Seconds the roofline has no term for, at the profile's floor (1 token, 1 sequence):
    (per decoder layer, once a step). Per layer: the element-wise operators the architecture runs
    (every dense.csv operator but the weight GEMMs: norms, rotary, activation, q/k norm) at its
    count; once: embedding, final_layernorm and the sampler. lm_head is left out: it is a weight
    GEMM, and the roofline's parameters already hold its FLOPs and bytes."""
    from allocator.cost.profile import ARCHITECTURES

    arch = ARCHITECTURES.get(bundle.meta.get("architecture", ""))
    if arch is None:
        return 0.0, 0.0
    per_layer = sum(n * bundle.dense[op][1][0] for op, n in arch.per_layer.items()
                    if op not in GEMMS and op in bundle.dense)
    once = sum(n * bundle.dense[op][1][0] for op, n in arch.once.items() if op in bundle.dense)
    if "sampler" in bundle.per_sequence:
        once += bundle.per_sequence["sampler"][1][0]
    return float(per_layer), float(once)


def efficiency_for(gpu: GPU, model: ServedModel, tp: int = 1, root: str = PROFILE_ROOT) -> tuple[Efficiency, str] | None:
    """The roofline's efficiencies for ``gpu`` derived from operator microbenchmarks, with no run:
    (Efficiency, which bundles it came from), or None when no bundle profiles this GPU.

    * eta_flops, eta_bw: :func:`measured_shares` (capped at 1) of the bundle of this GPU, model
      and tensor-parallel degree when one exists, else their mean over every bundle of the GPU
      (each tensor-parallel folder counted once).
    * overhead_s: :data:`allocator.cost.profile.ENGINE_OVERHEAD_S` (the engine's own work,
      assumed) plus what the roofline has no term for, measured at its floor
      (:func:`left_out_floor`: per layer x the model's layers, plus once a step), averaged the same
      way; rounded to 0.01 ms.

    Nothing here is fitted on a serving run, so a run replayed with it is a check, not a fit.
    """
    exact, same_gpu = [], []
    for path, meta in bundles(root):
        if not gpu_matches(gpu, meta.get("hardware", "")):
            continue
        key = model_key(meta["model"])
        if key is None:
            continue
        for t in meta.get("tp_degrees", [1]):
            try:
                b = load_bundle(path, t)
            except FieldError:             # a damaged bundle is skipped here; ProfileCost names it
                continue
            own = REPLAY_MODELS[key]
            same_gpu.append((b, own))
            if key == model.config.key and t == tp:
                exact.append((b, own))
    chosen = exact or same_gpu
    if not chosen:
        return None
    f = b_ = per_layer = once = 0.0
    for b, own in chosen:
        sf, sb = measured_shares(b, gpu, own)
        pl, on = left_out_floor(b, own)
        f, b_, per_layer, once = f + min(sf, 1.0), b_ + min(sb, 1.0), per_layer + pl, once + on
    n = len(chosen)
    overhead = ENGINE_OVERHEAD_S + model.config.layers * per_layer / n + once / n
    eff = Efficiency(round(f / n, 4), round(b_ / n, 4), round(overhead, 5))
    return eff, "; ".join(b.name for b, _ in chosen)
