"""A step-time model calibrated on a measured vLLM run, with the hardware and model presets it needs.

:mod:`allocator.cost.timing` prices a step with the datasheet's peak figures (a roofline, optimistic by
design). This module prices it the way a real engine's step spends its time, with three named
efficiency parameters fitted on measured data, so a replay of a real run (``python -m allocator
replay-vllm``) can be checked against the run itself.

The step model (:class:`CalibratedCost`; per GPU under tensor parallelism ``tp``)::

    step_s = overhead_s                                              (scheduling, launches, sampling)
           + max(2 x params x T / (eta_flops x peak_flops),          (the weight GEMMs: compute-
                 weight_bytes / (eta_bw x bandwidth))                 or weight-read-bound)
           + 4 x layers x heads x head_dim x pairs / (eta_flops x peak_flops)      (attention maths)
           + kv_bytes_per_token x (decode_pairs + T) / (eta_bw x bandwidth)        (KV read + written)
           + all-reduce(T) when tp > 1                                             (not fitted)

with T the tokens computed in the step (prefill chunks + decodes) and pairs the attention's
query-key pairs (prefill and decode). Unlike :class:`allocator.cost.timing.CostModel`'s single
roofline of the whole step, the terms are **summed**: a real step runs the weight GEMMs and the
attention kernels one after the other, so a decode's KV read does not hide under a prefill
chunk's arithmetic.

The calibration (:data:`CALIBRATED`, reproduced by :func:`fit_efficiency`):

* **Data**: the shipped run, ``assets/vllm_runs/rtxpro6000_llama-3.1-8b/`` (vLLM 0.19,
  Llama-3.1-8B bf16 on one RTX PRO 6000 Blackwell, 300 ShareGPT requests at about 10/s).
* **Observations**: each request's measured TPOT (299 of 300 have more than one output token).
  A request's TPOT is the mean step time over its decode window. What each step held is read from
  the trace itself, on a 5 ms grid: the requests decoding (first token <= t < last token), their
  contexts (prompt + tokens emitted so far, interpolated at the request's own TPOT), and the
  prefill work in flight (each request's prompt tokens and causal pairs spread evenly from its
  scheduled time to its first token). Each grid point's step time solves the step model with that
  composition (prefill tokens per step = prefill rate x step time), and a request's predicted TPOT
  is its window's length over the steps the model fits in it.
* **Fit**: least squares on log(predicted / measured TPOT) over the requests, by grid search
  (eta_flops 0.20-1.00, eta_bw 0.30-1.00, overhead 0-12 ms), then two finer grids around the best
  (steps of 0.025 and 0.25 ms, then of 0.01 and 0.1 ms).
* **Result** on the shipped run: eta_flops = 0.585, eta_bw = 0.825, overhead 3.35 ms; residuals
  over the 300 requests: root-mean-square log error 1.5 %, mean error -0.1 %, 90 % of requests
  within 2.3 % (``tests/test_calibration.py`` reproduces these from the shipped files).
* **Held out** (:func:`allocator.studies.vllm_replay.held_out_check`): fitted on the first 150 requests by
  queue time alone, the parameters move (eta_flops 0.715, eta_bw 0.875, overhead 6.65 ms: the
  three trade off against each other), the other 150 requests' TPOT residuals grow to a
  root-mean-square log error of 5.3 % (mean +3.8 %), and a replay with those parameters is off
  on the held-out requests' mean TTFT by +6.6 %, TPOT +3.6 %, latency +4.9 %. Only one run is
  shipped, so the error on runs not seen (other GPUs, models, tensor parallelism) is **not
  measured here**.

Why these parameters could carry to another run (untested here: no other measured run ships):
each is a fraction of a datasheet figure (peak dense bf16
tensor FLOP/s, memory bandwidth) or a fixed time, so another GPU or model enters only through its
published numbers -- there is no per-run factor. The overhead is a CPU-side cost of vLLM's loop
and is assumed the same on every GPU (an assumption; it is where another machine will differ
most). The all-reduce term of tensor parallelism is priced from the link's datasheet bandwidth
and :data:`ALLREDUCE_LATENCY_S` and is not fitted (no tensor-parallel run is shipped).

The KV pool is derived as vLLM derives it (:func:`kv_pool_blocks`): gpu_memory_utilization x
memory - weights - an activation reserve, unless the run states ``num_gpu_blocks``.

Sources: the models' published config.json files and the GPUs' datasheets (see each preset's
``source``); vLLM's ``gpu_worker.determine_available_memory`` for the pool.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from allocator.accounting.models import ModelConfig
from allocator.common.formats import GIB
from allocator.cost.roofline import GPU, GPUS, attention_flops, weight_bytes
from allocator.common.errors import FieldError
from allocator.common.validate import real_number, whole_number

# ---------------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------------

#: GPUs a replay can run on: the cost model's presets plus the RTX PRO 6000 Blackwell.
REPLAY_GPUS: dict[str, GPU] = {
    **GPUS,
    "rtx-pro-6000": GPU(
        "rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell 96GB", 96 * GIB, 1.792e12, 503.8e12, 64e9, "PCIe 5.0 x16",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet and the NVIDIA RTX Blackwell GPU "
        "architecture whitepaper: 96 GB GDDR7 with ECC, 1,792 GB/s, FP16/BF16 tensor 503.8 TFLOPS dense "
        "(1,007.6 with sparsity), PCIe Gen5 x16 (128 GB/s both directions)."),
}

#: Names a run's ``hardware.gpu`` or directory name may use for each preset (lower case, no spaces).
GPU_ALIASES = {
    "rtx-pro-6000": ("rtxpro6000", "rtxpro6000blackwell", "rtx6000pro", "rtxpro6000workstation"),
    "rtx-4090": ("rtx4090", "geforcertx4090", "4090"),
    "h100-sxm": ("h100", "h100sxm", "h10080gb", "h100sxm5"),
    "h200": ("h200", "h200sxm"),
    "a100-40gb": ("a100", "a10040gb"),
    "l4": ("l4",),
}


@dataclass(frozen=True)
class ServedModel:
    """A model as a replay needs it: its :class:`ModelConfig` (shape, parameters, context) plus
    what vLLM's memory profile depends on.

    Attributes:
        config: the cost model's shape (layers, heads, KV heads, head_dim, hidden, parameters).
        intermediate_size: the feed-forward width (activation reserve).
        vocab_size: the vocabulary (the sampler's logits in the activation reserve).
        names: Hugging Face names that mean this model (lower case).
    """

    config: ModelConfig
    intermediate_size: int
    vocab_size: int
    names: tuple
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0

    @property
    def is_moe(self) -> bool:
        """Whether every decoder layer's MLP is a mixture of experts (``experts`` > 0)."""
        return self.experts > 0

    @property
    def expert_params(self) -> int:
        """Parameters of ONE expert of one layer: gate, up and down projections,
        3 x hidden x expert_intermediate_size (0 for a dense model)."""
        return 3 * self.config.hidden_size * self.expert_intermediate_size

    @property
    def active_params(self) -> int:
        """Parameters a token goes through: the total less the experts it is not routed to,
        params - layers x (experts - experts_per_token) x expert_params (= params when dense)."""
        if not self.is_moe:
            return self.config.params
        return self.config.params - self.config.layers * (self.experts - self.experts_per_token) * self.expert_params

    def expected_experts(self, tokens, group: int = 1):
        """Expected distinct experts of one layer that ``tokens`` tokens activate, among the
        ``experts / group`` experts one GPU of an expert-parallel group of ``group`` holds.

        Rule (uniform routing): each token picks ``k = experts_per_token`` distinct experts of
        ``E = experts``, so a given expert is missed by one token with probability 1 - k/E and by
        all ``tokens`` (routed independently) with probability (1 - k/E)^tokens; by linearity of
        expectation over the experts, E[distinct] = (E / group) x (1 - (1 - k/E)^tokens). It is
        at most ``k x tokens / group`` and at most ``E / group``. Real routers are skewed (a few
        experts are popular), which activates fewer distinct experts than this for the same
        tokens: the rule is the upper end of the experts' weight reads.

        Args:
            tokens: tokens entering the expert block (number or numpy array, >= 0).
            group: GPUs the experts are split over (expert parallelism; 1: all on one GPU).

        Returns:
            float or float64 array; 0 for a dense model or no tokens.
        """
        if not self.is_moe:
            return 0.0 * np.asarray(tokens, dtype=float) if isinstance(tokens, np.ndarray) else 0.0
        miss = 1.0 - self.experts_per_token / self.experts
        return self.experts / group * (1.0 - np.power(miss, np.maximum(tokens, 0)))


#: Models a replay can run (keys are the CLI's ``--model`` values). Shapes from the published
#: config.json files: Llama-3.1-8B (meta-llama/Llama-3.1-8B: 32 layers, 32 heads, 8 KV heads,
#: head_dim 128, hidden 4,096, intermediate 14,336, vocab 128,256, 131,072 positions;
#: 8,030,261,248 parameters) and Qwen3-32B (Qwen/Qwen3-32B: 64 layers, 64 heads, 8 KV heads,
#: head_dim 128, hidden 5,120, intermediate 25,600, vocab 151,936, untied embeddings, 40,960
#: positions; 32,762,123,264 parameters counted from that shape, the model card's "32.8B") and
#: the mixture-of-experts Qwen3-30B-A3B-Instruct-2507 (Qwen/Qwen3-30B-A3B-Instruct-2507: 48
#: layers, 32 heads, 4 KV heads, head_dim 128, hidden 2,048, every layer's MLP 128 experts of
#: moe_intermediate_size 768 with 8 routed per token (num_experts_per_tok), vocab 151,936, untied
#: embeddings, 262,144 positions; 30,532,122,624 parameters counted from that shape, 3,353,032,704
#: active per token: the model card's "30.5B in total and 3.3B activated").
REPLAY_MODELS: dict[str, ServedModel] = {
    "llama-3.1-8b": ServedModel(
        ModelConfig("llama-3.1-8b", "Llama 3.1 8B, bf16, GQA (32 layers x 8 KV heads x 128)", 32, 8, 128, 2, "bf16",
                    "meta-llama/Llama-3.1-8B config.json", "Llama 3.1 8B bf16",
                    hidden_size=4096, heads=32, params=8_030_261_248, max_context=131_072),
        14_336, 128_256, ("meta-llama/llama-3.1-8b", "meta-llama/llama-3.1-8b-instruct",
                          "meta-llama/meta-llama-3.1-8b", "meta-llama/meta-llama-3.1-8b-instruct")),
    "qwen3-32b": ServedModel(
        ModelConfig("qwen3-32b", "Qwen3 32B, bf16, GQA (64 layers x 8 KV heads x 128)", 64, 8, 128, 2, "bf16",
                    "Qwen/Qwen3-32B config.json", "Qwen3 32B bf16",
                    hidden_size=5120, heads=64, params=32_762_123_264, max_context=40_960),
        25_600, 151_936, ("qwen/qwen3-32b",)),
    "qwen3-30b-a3b": ServedModel(
        ModelConfig("qwen3-30b-a3b", "Qwen3 30B-A3B, bf16, mixture of experts (48 layers x 4 KV heads x 128; "
                    "128 experts, 8 a token)", 48, 4, 128, 2, "bf16",
                    "Qwen/Qwen3-30B-A3B-Instruct-2507 config.json", "Qwen3 30B-A3B bf16",
                    hidden_size=2048, heads=32, params=30_532_122_624, max_context=262_144),
        6_144, 151_936, ("qwen/qwen3-30b-a3b-instruct-2507", "qwen/qwen3-30b-a3b", "qwen/qwen3-30b-a3b-instruct"),
        experts=128, experts_per_token=8, expert_intermediate_size=768),
}


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def gpu_for(key: str | None, hardware: dict | None = None, run_name: str = "") -> GPU:
    """The GPU preset: ``key`` if given (a preset key or alias), else the run's ``hardware.gpu``,
    else the directory name's first part (``rtxpro6000_llama-3.1-8b`` -> RTX PRO 6000).

    Raises:
        FieldError (``gpu``): an unknown key, or nothing names the GPU.
    """
    candidates = [key] if key else [str((hardware or {}).get("gpu") or (hardware or {}).get("gpu_name") or ""),
                                    run_name.split("_")[0]]
    for text in candidates:
        if not text:
            continue
        if text in REPLAY_GPUS:
            return REPLAY_GPUS[text]
        sq = _squash(text)
        for k, aliases in GPU_ALIASES.items():
            if sq == _squash(k) or sq in aliases or any(a in sq for a in aliases if len(a) > 3):
                return REPLAY_GPUS[k]
        if key:
            break
    what = f" = {key!r} is not a GPU preset" if key else ": the run does not name its GPU"
    raise FieldError("gpu", f"{what}; give --gpu, one of {', '.join(REPLAY_GPUS)}")


def model_for(key: str) -> ServedModel:
    """The model preset for a ``--model`` key or a Hugging Face name (case ignored).

    Raises:
        FieldError (``model``): a model without a preset.
    """
    if isinstance(key, str):
        k = key.strip().lower()
        if k in REPLAY_MODELS:
            return REPLAY_MODELS[k]
        for m in REPLAY_MODELS.values():
            if k in m.names or k.split("/")[-1] == m.config.key:
                return m
    raise FieldError("model", f" = {key!r} has no preset; give --model, one of {', '.join(REPLAY_MODELS)}")


# ---------------------------------------------------------------------------------------------
# The step model
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Efficiency:
    """The calibration's named parameters.

    Attributes:
        eta_flops: achieved fraction of the datasheet's peak dense bf16 tensor FLOP/s (0-1].
        eta_bw: achieved fraction of the datasheet's memory bandwidth (0-1].
        overhead_s: fixed seconds per step (scheduler, kernel launches, sampling, Python).
    """

    eta_flops: float
    eta_bw: float
    overhead_s: float

    def __post_init__(self):
        real_number("eta_flops", self.eta_flops, above=0, maximum=1)
        real_number("eta_bw", self.eta_bw, above=0, maximum=1)
        real_number("overhead_s", self.overhead_s, 0, 1)


#: The calibrated parameters (fitted on the shipped run; see the module docstring and
#: :func:`fit_efficiency`, which reproduces them).
CALIBRATED = Efficiency(eta_flops=0.585, eta_bw=0.825, overhead_s=0.00335)
#: Seconds per all-reduce beyond its bytes (NCCL's small-message latency over PCIe; an
#: assumption, not fitted: no tensor-parallel run is shipped).
ALLREDUCE_LATENCY_S = 10e-6


@dataclass(frozen=True)
class CalibratedCost:
    """One step's seconds on ``tp`` GPUs serving ``model`` (see the module docstring's formula).

    Args:
        gpu: the GPU preset; model: the served model; tp: tensor-parallel GPUs (>= 1).
        efficiency: the fitted parameters (default :data:`CALIBRATED`).

    A mixture-of-experts ``model`` is priced through its active parameters (the compute of the
    experts a token is routed to) and the weights a step reads (the shared weights plus the
    experts it activates, :meth:`weights_seconds`); ``dp`` (data-parallel ranks, each priced as
    one of these) and ``ep`` (expert parallelism over dp x tp GPUs) add the dispatch and combine
    (:meth:`expert_parallel_seconds`). Each rank's step is priced with every rank assumed as busy
    as this one (vLLM pads the ranks of a data-parallel MoE step to the busiest one's tokens).

    ``step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks)``
    is what :func:`allocator.engine.simulate.simulate` calls on the seconds clock (the v1 rules never swap).
    """

    gpu: GPU
    model: ServedModel
    tp: int = 1
    efficiency: Efficiency = CALIBRATED
    dp: int = 1
    ep: bool = False
    _k: tuple = field(init=False, repr=False, compare=False, hash=False)
    _moe: tuple | None = field(init=False, repr=False, compare=False, hash=False, default=None)

    def __post_init__(self):
        whole_number("tp", self.tp, 1, 64)
        whole_number("dp", self.dp, 1, 64)
        sm, m, e = self.model, self.model.config, self.efficiency
        flops = e.eta_flops * self.gpu.peak_flops * self.tp
        bw = e.eta_bw * self.gpu.hbm_bytes_per_s * self.tp
        if self.tp > 1:     # two all-reduces per layer of T x hidden bf16 values, ring over the host link
            ring = 2.0 * (self.tp - 1) / self.tp
            ar_tok = 2 * m.layers * ring * m.hidden_size * m.bytes_per_element / self.gpu.host_link_bytes_per_s
            ar_fix = 2 * m.layers * ALLREDUCE_LATENCY_S
        else:
            ar_tok = ar_fix = 0.0
        # mixture of experts: the experts' weights are read once per activated expert, on the GPU
        # holding it (an expert-parallel group of dp x tp GPUs splits them, unsplit inside an expert)
        group = self.dp * self.tp if (sm.is_moe and self.ep) else 1
        expert_bytes = m.layers * sm.expert_params * m.bytes_per_element
        dense_bytes = weight_bytes(m) - sm.experts * expert_bytes
        one_gpu_bw = e.eta_bw * self.gpu.hbm_bytes_per_s
        if group > 1:       # dispatch (all-gather) and combine (reduce-scatter) of every MoE layer
            ep_tok = (2 * m.layers * (group - 1) / group * self.dp * m.hidden_size * m.bytes_per_element
                      / self.gpu.host_link_bytes_per_s)
            ep_fix = 2 * m.layers * ALLREDUCE_LATENCY_S
        else:
            ep_tok = ep_fix = 0.0
        object.__setattr__(self, "_k", (
            e.overhead_s,
            2.0 * sm.active_params / flops,                # s per token through the weights (compute)
            dense_bytes / bw,                              # s to read the weights once (all, when dense)
            attention_flops(m, 1) / flops,                 # s per attention pair
            m.bytes_per_token / bw,                        # s per KV token read or written
            ar_tok, ar_fix))
        object.__setattr__(self, "_moe", (expert_bytes / one_gpu_bw, group, ep_tok, ep_fix) if sm.is_moe else None)

    def weights_seconds(self, tokens):
        """Seconds to read the weights a step of ``tokens`` tokens (on this rank) touches: all of
        them for a dense model; for a mixture of experts, the layers' shared weights plus the
        experts the step activates on this GPU (:meth:`ServedModel.expected_experts` at the
        ``dp x tokens`` tokens the data-parallel ranks send it, every rank assumed as busy as this
        one), each read once."""
        w = self._k[2]
        if self._moe is None:
            return w
        per_expert, group, _, _ = self._moe
        return w + per_expert * self.model.expected_experts(self.dp * tokens, group)

    def expert_parallel_seconds(self, tokens):
        """Seconds of the expert-parallel dispatch and combine of a step of ``tokens`` tokens per
        rank: 2 x layers x (latency + (P-1)/P x dp x tokens x hidden x 2 bytes / link) for an
        expert-parallel group of P = dp x tp GPUs (vLLM 0.19's default all2all backend,
        ``allgather_reducescatter``: vllm/envs.py VLLM_ALL2ALL_BACKEND; a ring all-gather and a
        ring reduce-scatter each move (P-1)/P of the gathered bytes over each GPU's link); 0
        without expert parallelism."""
        if self._moe is None or self._moe[1] == 1:
            return 0.0 * tokens
        _, _, ep_tok, ep_fix = self._moe
        return ep_tok * tokens + ep_fix * (tokens > 0)

    @property
    def label(self) -> str:
        """E.g. ``"Llama 3.1 8B bf16 on NVIDIA RTX PRO 6000 Blackwell 96GB"``."""
        return f"{self.model.config.short} on {'' if self.tp == 1 else f'{self.tp} x '}{self.gpu.label}"

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks=0) -> float:
        """Seconds of one step with these tokens and attention pairs (numbers or numpy arrays)."""
        o, lin, w, att, kv, ar_tok, ar_fix = self._k
        tokens = prefill_tokens + decode_tokens
        if self._moe is not None:
            w = self.weights_seconds(tokens)
        gemm = np.maximum(lin * tokens, w) if isinstance(tokens, np.ndarray) else max(lin * tokens, w)
        t = o + gemm + att * (prefill_pairs + decode_pairs) + kv * (decode_pairs + tokens) + ar_tok * tokens
        if self._moe is not None:
            t = t + self.expert_parallel_seconds(tokens)
        return t + ar_fix * (tokens > 0)

    def terms(self) -> dict:
        """The model's constants, named (seconds per unit), for the page and --json."""
        o, lin, w, att, kv, ar_tok, ar_fix = self._k
        out = {"overhead_s": o, "s_per_token_gemm": lin, "weights_read_s": w, "s_per_attention_pair": att,
               "s_per_kv_token": kv, "allreduce_s_per_token": ar_tok, "allreduce_s_per_step": ar_fix}
        if self._moe is not None:
            per_expert, group, ep_tok, ep_fix = self._moe
            out.update({"weights_read_s": w, "expert_read_s": per_expert, "expert_parallel_gpus": group,
                        "expert_parallel_s_per_token": ep_tok, "expert_parallel_s_per_step": ep_fix})
        return out


def kv_pool_blocks(gpu: GPU, model: ServedModel, tp: int, block_size: int, *, gpu_memory_utilization: float = 0.9,
                   max_num_batched_tokens: int = 2048, max_num_seqs: int = 256, expert_group: int = 1) -> int:
    """KV-cache blocks as vLLM sizes the pool: per GPU, gpu_memory_utilization x memory - weights / tp
    - activation reserve, divided by a block's bytes on one GPU.

    The activation reserve stands in for vLLM's profiling run (``determine_available_memory``),
    which measures the peak of a forward pass of max_num_batched_tokens tokens plus the sampler:
    here max_num_batched_tokens x (hidden x 4 + 2 x intermediate / tp) x 2 bytes for the widest
    activations, plus max_num_seqs x vocab x 4 bytes of float32 logits, plus 1 GiB for the CUDA
    context, cuBLAS workspaces and CUDA graphs (an estimate, not a measurement). A mixture of
    experts under expert parallelism over ``expert_group`` GPUs holds 1 / expert_group of the
    experts' weights on each GPU (and its shared weights split over tp).

    Raises:
        FieldError (``gpu``): the weights and the reserve leave no room for a block.
    """
    m = model.config
    per_gpu = gpu.memory_bytes * real_number("gpu_memory_utilization", gpu_memory_utilization, above=0, maximum=1)
    activations = (max_num_batched_tokens * (4 * m.hidden_size + 2 * model.intermediate_size // tp) * 2
                   + max_num_seqs * model.vocab_size * 4 + GIB)
    expert_bytes = model.experts * m.layers * model.expert_params * m.bytes_per_element
    weights = (weight_bytes(m) - expert_bytes) / tp + expert_bytes / (expert_group if expert_group > 1 else tp)
    free = per_gpu - weights - activations
    block_bytes = block_size * m.bytes_per_token / tp
    blocks = int(free // block_bytes)
    if blocks < 1:
        raise FieldError("gpu", f": {tp} x {gpu.label} cannot hold {m.short}'s weights and a KV cache")
    return blocks


# ---------------------------------------------------------------------------------------------
# The fit
# ---------------------------------------------------------------------------------------------

#: Grid spacing of the trace's reconstructed step composition (seconds).
FIT_GRID_S = 0.005


@dataclass(frozen=True)
class Fit:
    """What :func:`fit_efficiency` returns.

    Attributes:
        efficiency: the best parameters.
        rms_log_error: root mean square of log(predicted / measured TPOT) over the fitted requests.
        mean_error, p90_abs_error: mean and 90th percentile of |predicted / measured - 1| (fractions).
        requests: how many requests were fitted.
        held_out: the same three figures on the requests not fitted (None if all were).
    """

    efficiency: Efficiency
    rms_log_error: float
    mean_error: float
    p90_abs_error: float
    requests: int
    held_out: dict | None = None


def _composition(run, dt: float = FIT_GRID_S):
    """The trace's steps on a grid: per grid point, decoding requests D, their decode pairs DP,
    prefill token rate p and pair rate pp (per second); plus the grid."""
    grid = np.arange(0.0, float(run.last.max()) + dt, dt)
    D = np.zeros_like(grid)
    DP = np.zeros_like(grid)
    p = np.zeros_like(grid)
    pp = np.zeros_like(grid)
    tpot = np.nan_to_num(run.tpot, nan=1.0)
    for j in range(len(run)):
        a, b = np.searchsorted(grid, [run.first[j], run.last[j]])
        if b > a:
            D[a:b] += 1
            DP[a:b] += run.prompt[j] + 1 + (grid[a:b] - run.first[j]) / max(tpot[j], 1e-4)
        a, b = np.searchsorted(grid, [run.scheduled[j], run.first[j]])
        b = max(b, a + 1)
        span = (b - a) * dt
        c = int(run.prompt[j])
        p[a:b] += c / span
        pp[a:b] += c * (c + 1) / 2 / span
    return grid, D, DP, p, pp


def _step_times(cost: CalibratedCost, D, DP, p, pp):
    """Solve step = model(step) on each grid point, prefill tokens = p x step (fixed point of a
    max of two increasing lines: the larger of the two lines' own fixed points)."""
    o, lin, w, att, kv, ar_tok, ar_fix = cost._k
    base = o + ar_fix + att * DP + kv * (DP + D) + ar_tok * D
    slope = att * pp + (kv + ar_tok) * p
    s_compute = (base + lin * D) / np.maximum(1 - slope - lin * p, 1e-9)
    s_weights = (base + w) / np.maximum(1 - slope, 1e-9)
    return np.maximum(s_compute, s_weights)


def _predicted_tpot(run, grid, steps, dt: float = FIT_GRID_S):
    inv = np.concatenate([[0.0], np.cumsum(dt / steps)])
    a, b = np.searchsorted(grid, run.first), np.searchsorted(grid, run.last)
    return (run.last - run.first) / np.maximum(inv[b] - inv[a], 1e-9)


def _errors(pred, meas) -> dict:
    r = pred / meas
    return {"rms_log_error": float(np.sqrt(np.mean(np.log(r) ** 2))), "mean_error": float(np.mean(r - 1)),
            "p90_abs_error": float(np.percentile(np.abs(r - 1), 90)), "requests": int(len(r))}


def fit_efficiency(run, gpu: GPU, model: ServedModel, tp: int = 1, fit_mask=None) -> Fit:
    """Fit :class:`Efficiency` to a run's per-request TPOT (method: the module docstring).

    Args:
        run: a :class:`allocator.workloads.vllm_run.VllmRun`.
        gpu, model, tp: what the run ran on.
        fit_mask: bool [requests] selecting the requests fitted (default all); the others are
            reported as ``held_out``.

    Returns:
        a :class:`Fit` (eta values to 0.005, the overhead to 0.05 ms, as the grids land).

    Raises:
        FieldError (``requests``): fewer than 3 requests with more than one output token to fit.
    """
    grid, D, DP, p, pp = _composition(run)
    meas = run.tpot
    ok = np.isfinite(meas) & (meas > 0)
    mask = ok if fit_mask is None else ok & np.asarray(fit_mask, dtype=bool)
    if mask.sum() < 3:
        raise FieldError("requests", ": fewer than 3 requests with more than one output token to fit")

    def score(e):
        cost = CalibratedCost(gpu, model, tp, e)
        pred = _predicted_tpot(run, grid, _step_times(cost, D, DP, p, pp))
        return float(np.mean(np.log(pred[mask] / meas[mask]) ** 2)), pred

    def search(fs, bs, os_):
        best = None
        for f in fs:
            for b in bs:
                for o in os_:
                    e = Efficiency(round(float(f), 4), round(float(b), 4), round(float(o), 6))
                    s, _ = score(e)
                    if best is None or s < best[0]:
                        best = (s, e)
        return best[1]

    e = search(np.linspace(0.2, 1.0, 9), np.linspace(0.3, 1.0, 8), np.linspace(0, 0.012, 13))
    e = search(np.clip(np.arange(e.eta_flops - 0.1, e.eta_flops + 0.101, 0.025), 0.05, 1.0),
               np.clip(np.arange(e.eta_bw - 0.1, e.eta_bw + 0.101, 0.025), 0.05, 1.0),
               np.clip(np.arange(e.overhead_s - 0.001, e.overhead_s + 0.00101, 0.00025), 0, 1))
    e = search(np.clip(np.arange(e.eta_flops - 0.02, e.eta_flops + 0.0201, 0.01), 0.01, 1.0),
               np.clip(np.arange(e.eta_bw - 0.02, e.eta_bw + 0.0201, 0.01), 0.01, 1.0),
               np.clip(np.arange(e.overhead_s - 0.0002, e.overhead_s + 0.00021, 0.0001), 0, 1))
    _, pred = score(e)
    fitted = _errors(pred[mask], meas[mask])
    rest = ok & ~mask
    return Fit(e, fitted["rms_log_error"], fitted["mean_error"], fitted["p90_abs_error"], fitted["requests"],
               _errors(pred[rest], meas[rest]) if rest.any() else None)
