"""The cost model: what one engine step costs in seconds on a chosen GPU and model (a roofline).

The engine counts work in tokens and blocks; this module prices one step of that work.
:mod:`allocator.cost.timing` prices a whole run with it (per-request latencies, a summary).

One step of the engine (vLLM's iteration; the engine's rules are in
``assets/reference_figures.md``, R9) does:

* **prefill** of every sequence admitted in it: its context of ``c`` tokens (the prompt, plus
  the tokens it had generated when it was preempted by recompute) goes through the model, and
  its causal attention scores ``c(c+1)/2`` query-key pairs;
* **decode** of every other running sequence: one token through the model, whose query attends
  to every token the sequence holds;
* **swap** of blocks to or from host memory, when swap preemption evicted or resumed a sequence.

Its time is a roofline (Williams, Waterman and Patterson, "Roofline", CACM 2009): the step is
limited either by arithmetic or by memory traffic, whichever takes longer, plus a fixed
per-step overhead (scheduling, kernel launches, sampling), plus the swap copies, which the
engine waits for::

    step_s = max(flops / peak_flops, bytes / hbm_bandwidth) + overhead_s + swap_s
    flops  = 2 x parameters x (prefill tokens + decode tokens)          (Kaplan et al. 2020)
           + 4 x layers x heads x head_dim x (prefill pairs + decode pairs)
    bytes  = weights (once per step that runs the model)
           + KV read: every decode pair reads one token's K and V
           + KV written: every prefilled or decoded token's K and V
    swap_s = blocks x block bytes / host link + blocks x 2 x layers x transfer latency

The roofline is written once, :meth:`CostModel.roofline`, for one step (the engine, every step
on the seconds clock) and for every record of a run at once (:func:`allocator.cost.timing.breakdown`).

Why these terms. Every weight multiplies each token once (a multiply and an add: 2 FLOPs per
parameter per token). Attention adds two matrix products per layer and query head -- the
scores Q.K^T and the weighted sum of V -- each 2 x head_dim FLOPs per query-key pair. A decode
step must stream all weights from HBM however small the batch, which is why batching helps:
the same bytes serve more tokens. Decoding also reads the whole KV cache of every running
sequence, which grows with context. Prefill attention works on keys and values it has just
computed, so no KV read is charged for it. A recompute preemption therefore costs the FLOPs
of prefilling the recomputed tokens again (the engine counts them in ``prefill_tokens``).
vLLM copies a swapped block with one ``cudaMemcpyAsync`` per layer for K and for V (its cache
engine's ``swap_blocks``), so a block costs ``2 x layers`` transfers, each with a fixed latency:
with small blocks the latency dominates and swapping is slow -- the PagedAttention paper's
finding on swap versus recompute and block size (Kwon et al., SOSP 2023, section 7.3).

Assumptions (documented, not measured): peak figures are the datasheets' (real kernels reach
perhaps half to three quarters of them, so the model is optimistic about absolute seconds,
not about comparisons between allocators, which share every term); ``overhead_s`` = 2 ms per
step; ``transfer_latency_s`` = 5 us per copy; the host link runs at the datasheet's per-direction
PCIe rate. With ``gpus`` > 1 the model is split by tensor parallelism: memory, bandwidth, FLOP/s
and host links add up, and the all-reduces between GPUs are **not** priced (optimistic).
Vidur (Agrawal et al., MLSys 2024) profiles each operator instead of using a roofline; this model
is the classroom version of the same idea.

Units: tokens, slots, bytes, seconds, FLOPs (floating-point operations), bytes/s and FLOP/s
(decimal, as datasheets state them), memory sizes in binary GiB (see
:mod:`allocator.accounting.units`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from allocator.accounting.memory import kv_pool_bytes
from allocator.accounting.models import PRESETS as MODEL_PRESETS
from allocator.accounting.models import ModelConfig, model_config
from allocator.common.formats import GIB
from allocator.common.errors import FieldError
from allocator.common.validate import real_number, whole_number


@dataclass(frozen=True)
class GPU:
    """One accelerator's datasheet figures.

    Attributes:
        key: the CLI's ``--gpu`` value.
        label: display name.
        memory_bytes: device memory (bytes; the datasheet's GB read as binary GiB, as HBM stacks
            are built -- a driver reports a little less, which the reserve absorbs).
        hbm_bytes_per_s: peak memory bandwidth (bytes/s, decimal as on the datasheet).
        peak_flops: peak dense fp16/bf16 tensor-core throughput (FLOP/s; datasheets often print
            the 2:4 sparse figure, twice this).
        host_link_bytes_per_s: host link bandwidth in one direction (bytes/s): half the
            datasheet's both-directions PCIe figure.
        host_link: the link's name, e.g. "PCIe 4.0 x16".
        source: where the figures come from.
    """

    key: str
    label: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flops: float
    host_link_bytes_per_s: float
    host_link: str
    source: str


#: Accelerators with their datasheet figures (keys are the CLI's ``--gpu`` values).
GPUS: dict[str, GPU] = {
    "a100-40gb": GPU(
        "a100-40gb", "NVIDIA A100 40GB", 40 * GIB, 1.555e12, 312e12, 32e9, "PCIe 4.0 x16",
        "NVIDIA A100 Tensor Core GPU datasheet: 40 GB HBM2, 1,555 GB/s, FP16/BF16 tensor 312 TFLOPS "
        "dense (624 with sparsity), PCIe Gen4 64 GB/s both directions. The PagedAttention paper's GPU."),
    "h100-sxm": GPU(
        "h100-sxm", "NVIDIA H100 SXM 80GB", 80 * GIB, 3.35e12, 989e12, 64e9, "PCIe 5.0 x16",
        "NVIDIA H100 Tensor Core GPU datasheet (SXM): 80 GB HBM3, 3.35 TB/s, BF16 tensor 1,979 TFLOPS "
        "with sparsity (989 dense), PCIe Gen5 128 GB/s both directions."),
    "h200": GPU(
        "h200", "NVIDIA H200 SXM 141GB", 141 * GIB, 4.8e12, 989e12, 64e9, "PCIe 5.0 x16",
        "NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, BF16 tensor 1,979 TFLOPS "
        "with sparsity (989 dense), PCIe Gen5 128 GB/s both directions."),
    "l4": GPU(
        "l4", "NVIDIA L4 24GB", 24 * GIB, 300e9, 121e12, 32e9, "PCIe 4.0 x16",
        "NVIDIA L4 Tensor Core GPU datasheet: 24 GB GDDR6, 300 GB/s, FP16 tensor 242 TFLOPS with "
        "sparsity (121 dense), PCIe Gen4 x16 64 GB/s both directions."),
    "rtx-4090": GPU(
        "rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24 * GIB, 1.008e12, 165.2e12, 32e9, "PCIe 4.0 x16",
        "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090): 24 GB GDDR6X, 1,008 GB/s, FP16 tensor "
        "with FP32 accumulate 165.2 TFLOPS dense (330.4 with sparsity); PCIe 4.0 x16."),
}

#: Fixed time of one engine step beyond its roofline: scheduling, kernel launches, sampling
#: (seconds). An assumption of this model, not a measurement.
DEFAULT_OVERHEAD_S = 2e-3
#: Fixed latency of one host<->device copy (seconds): the cost of issuing a small cudaMemcpyAsync.
#: An assumption of this model, not a measurement.
DEFAULT_TRANSFER_LATENCY_S = 5e-6
#: Share of GPU memory kept back from the KV cache for activations, the CUDA context and the
#: allocator's slack: vLLM's default ``gpu_memory_utilization`` = 0.9 leaves 10 %.
DEFAULT_RESERVE_FRACTION = 0.10
#: Tensor-parallel GPU counts offered.
GPU_COUNTS = (1, 2, 4, 8)
#: Defaults: the PagedAttention paper's set-up (OPT-13B on one A100 40GB).
DEFAULT_GPU = "a100-40gb"
DEFAULT_MODEL = "opt-13b"
#: Models the cost model can price (those presets whose parameter count is known).
TIMED_MODELS = tuple(k for k, m in MODEL_PRESETS.items() if m.params)


def gpu_preset(key: str) -> GPU:
    """The accelerator named ``key`` (one of :data:`GPUS`).

    Raises:
        FieldError (``gpu``): any other key.
    """
    try:
        return GPUS[key]
    except (KeyError, TypeError):
        raise FieldError("gpu", f" = {key!r} is not a preset; choose one of {', '.join(GPUS)}") from None


def timed_model(key: str) -> ModelConfig:
    """The model preset named ``key``, checked to carry what the cost model needs.

    Raises:
        FieldError (``model``): not a preset, or a preset without a parameter count.
    """
    model = model_config(key)
    if not (model.params and model.heads and model.hidden_size):
        raise FieldError("model", f" = {key!r} has no parameter count or head count; choose one of "
                         f"{', '.join(TIMED_MODELS)}")
    return model


# ---------------------------------------------------------------------------------------------
# The cost terms (each works on numbers or numpy arrays alike)
# ---------------------------------------------------------------------------------------------

def linear_flops(model: ModelConfig, tokens):
    """FLOPs of the weight matrix products for ``tokens`` tokens: 2 x parameters per token.

    Source: Kaplan et al., "Scaling Laws for Neural Language Models", 2020, section 2.1 (a
    forward pass costs about 2N FLOPs per token for N parameters).
    """
    return 2.0 * model.params * tokens


def attention_flops(model: ModelConfig, pairs):
    """FLOPs of attention over ``pairs`` query-key pairs: 4 x layers x heads x head_dim per pair
    (Q.K^T and the weighted sum of V, 2 x head_dim each, for every query head of every layer)."""
    return 4.0 * model.layers * model.heads * model.head_dim * pairs


def weight_bytes(model: ModelConfig) -> int:
    """Bytes of the model's weights: parameters x bytes per element (fp16/bf16: 2)."""
    return model.params * model.bytes_per_element


def kv_bytes(model: ModelConfig, tokens):
    """Bytes of K and V for ``tokens`` tokens (read or written): tokens x the Capacity page's
    KV bytes per token (:attr:`ModelConfig.bytes_per_token`)."""
    return model.bytes_per_token * tokens


def transfers_per_block(model: ModelConfig) -> int:
    """Host<->device copies per swapped block: one per layer for K and one for V (vLLM's
    ``CacheEngine.swap_in/swap_out`` call ``swap_blocks`` per layer, one copy per block)."""
    return 2 * model.layers


@dataclass(frozen=True)
class CostModel:
    """A GPU (or ``gpus`` of them, tensor parallel) serving one model: what a step costs.

    Args:
        gpu: the accelerator.
        model: the model (a preset with ``params``, ``heads`` and ``hidden_size``).
        gpus: GPUs the model is split over by tensor parallelism (1, 2, 4 or 8).
        overhead_s: fixed seconds per step (default :data:`DEFAULT_OVERHEAD_S`).
        transfer_latency_s: fixed seconds per host<->device copy (default
            :data:`DEFAULT_TRANSFER_LATENCY_S`).
        reserve_fraction: share of GPU memory kept from the KV cache (default 0.1).

    Raises:
        FieldError: ``gpus`` not one of 1, 2, 4, 8; a negative overhead or latency; a reserve
            outside 0 .. 0.9; a model the cost model cannot price (``model``).
    """

    gpu: GPU
    model: ModelConfig
    gpus: int = 1
    overhead_s: float = DEFAULT_OVERHEAD_S
    transfer_latency_s: float = DEFAULT_TRANSFER_LATENCY_S
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION
    #: Why a better model did not apply ("" when none was asked for; :func:`allocator.cost.best.best_cost_model`).
    why: str = field(default="", compare=False, hash=False)
    _k: tuple = field(init=False, repr=False, compare=False, hash=False)
    #: Which kind of cost model prices the steps ("roofline" here; "profile" in allocator.cost.best).
    kind = "roofline"

    def __post_init__(self):
        if self.gpus not in GPU_COUNTS:
            raise FieldError("gpus", f" = {self.gpus!r} must be one of {', '.join(map(str, GPU_COUNTS))}")
        real_number("overhead_s", self.overhead_s, 0)
        real_number("transfer_latency_s", self.transfer_latency_s, 0)
        real_number("reserve_fraction", self.reserve_fraction, 0, 0.9)
        if not (self.model.params and self.model.heads):
            raise FieldError("model", f" = {self.model.key!r} has no parameter count or head count")
        m = self.model
        # constants of the roofline, precomputed (the engine prices every step with it)
        object.__setattr__(self, "_k", (
            2.0 * m.params / self.peak_flops,                              # s per token (linear)
            4.0 * m.layers * m.heads * m.head_dim / self.peak_flops,        # s per attention pair
            weight_bytes(m) / self.hbm_bytes_per_s,                         # s to read the weights
            m.bytes_per_token / self.hbm_bytes_per_s,                       # s per KV token moved
            self.overhead_s,                    # (allocator.studies.rate_sweep.unloaded_latency unpacks all five)
        ))

    @property
    def peak_flops(self) -> float:
        """FLOP/s of all GPUs together."""
        return self.gpu.peak_flops * self.gpus

    @property
    def hbm_bytes_per_s(self) -> float:
        """Memory bandwidth of all GPUs together (bytes/s)."""
        return self.gpu.hbm_bytes_per_s * self.gpus

    @property
    def host_link_bytes_per_s(self) -> float:
        """Host link bandwidth of all GPUs together, one direction (bytes/s)."""
        return self.gpu.host_link_bytes_per_s * self.gpus

    @property
    def memory_bytes(self) -> int:
        """Device memory of all GPUs together (bytes)."""
        return self.gpu.memory_bytes * self.gpus

    @property
    def label(self) -> str:
        """E.g. ``"OPT-13B fp16 on NVIDIA A100 40GB"`` or ``"... on 4 x NVIDIA A100 40GB"``."""
        return f"{self.model.short or self.model.label} on {'' if self.gpus == 1 else f'{self.gpus} x '}{self.gpu.label}"

    @property
    def priced_by(self) -> str:
        """Which model produced this cost model's seconds, in words a page puts beside them."""
        return "the datasheet roofline (a model from datasheet peaks, not a measurement)"

    @property
    def short_name(self) -> str:
        """The kind in two words, for an axis title or a table header."""
        return "datasheet roofline"

    def with_why(self, why: str) -> "CostModel":
        """This cost model with :attr:`why` set (why no better model applied)."""
        from dataclasses import replace
        return replace(self, why=why)

    def kv_pool_bytes(self) -> int:
        """Memory left for the KV cache: GPU memory - weights - reserve (bytes), through the
        Capacity page's arithmetic (:func:`allocator.accounting.memory.kv_pool_bytes`).

        Raises:
            FieldError (``gpus``): the weights and the reserve do not leave room for one token.
        """
        reserve = int(self.memory_bytes * self.reserve_fraction)
        try:
            return kv_pool_bytes(self.memory_bytes, weight_bytes(self.model), reserve,
                                 self.model.bytes_per_token)
        except FieldError as exc:
            raise FieldError("gpus", f" = {self.gpus}: {exc.detail} ({self.label}); use more GPUs "
                             "or a smaller model") from None

    def pool_slots(self) -> int:
        """KV-cache slots that fit: floor(:meth:`kv_pool_bytes` / KV bytes per token)."""
        return self.kv_pool_bytes() // self.model.bytes_per_token

    def swap_seconds(self, blocks, block_size: int):
        """Seconds to copy ``blocks`` blocks of ``block_size`` slots over the host link: their
        bytes / link bandwidth + blocks x 2 x layers x transfer latency (the copies of all
        GPUs run side by side, so the latency term does not grow with ``gpus``)."""
        data = blocks * block_size * self.model.bytes_per_token / self.host_link_bytes_per_s
        return data + blocks * transfers_per_block(self.model) * self.transfer_latency_s

    def roofline(self, tokens, pairs, decode_pairs):
        """The roofline of a step: ``(compute_s, memory_s)``, the one place it is written (the engine's
        per-step :meth:`BoundCostModel.pricer` repeats its arithmetic inline for speed, held to it
        float-for-float by ``tests/core/test_pricer.py``).

        Works on numbers (one step: :meth:`step_seconds`, which the engine calls every step) and
        on numpy arrays of one shape alike (every record of a run: :func:`allocator.cost.timing.breakdown`).

        Args:
            tokens: tokens through the model (prefill + decode).
            pairs: attention query-key pairs (prefill + decode).
            decode_pairs: the decode pairs among them (each reads one token's K and V).

        Returns:
            ``compute_s`` = (2 x parameters x tokens + 4 x layers x heads x head_dim x pairs) /
            peak FLOP/s and ``memory_s`` = (weights when tokens > 0 + KV bytes per token x
            (decode_pairs + tokens)) / HBM bytes/s, in seconds (see the module's formula).
        """
        lin, att, w, kv, _ = self._k
        return lin * tokens + att * pairs, w * (tokens > 0) + kv * (decode_pairs + tokens)

    def step_seconds(self, prefill_tokens: int, prefill_pairs: int, decode_tokens: int, decode_pairs: int,
                     swapped_blocks: int, block_size: int | None = None) -> float:
        """Seconds of one step: max(:meth:`roofline`) + overhead + swap copies (the scalar form the
        engine calls every step on the seconds clock).

        Args:
            prefill_tokens, decode_tokens: tokens through the model this step.
            prefill_pairs, decode_pairs: attention query-key pairs (decode pairs = KV tokens read).
            swapped_blocks: blocks copied to or from host memory this step.
            block_size: slots per block (needed only when ``swapped_blocks`` > 0; the engine's
                cost model is bound to one with :meth:`for_blocks`).

        Raises:
            FieldError (``block_size``): blocks were swapped and no block size is known.
        """
        compute, memory = self.roofline(prefill_tokens + decode_tokens, prefill_pairs + decode_pairs, decode_pairs)
        t = (compute if compute > memory else memory) + self.overhead_s
        if swapped_blocks:
            t += self.swap_seconds(swapped_blocks, block_size if block_size is not None else self._block_size())
        return t

    def _block_size(self) -> int:
        raise FieldError("block_size", ": a step that swaps blocks needs the block size (use for_blocks)")

    def for_blocks(self, block_size: int | None) -> "BoundCostModel":
        """This cost model bound to a pool's block size, as the engine calls it."""
        return BoundCostModel(self, block_size)


@dataclass(frozen=True)
class BoundCostModel:
    """A :class:`CostModel` with the block size of the pool it prices (for swap copies)."""

    cost: CostModel
    block_size: int | None

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks) -> float:
        """:meth:`CostModel.step_seconds` with this pool's block size."""
        return self.cost.step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks,
                                      self.block_size)

    def pricer(self):
        """:meth:`step_seconds` as one plain function, for the engine's loop (it prices every step, and
        the three calls through this class, :meth:`CostModel.step_seconds` and :meth:`CostModel.roofline`
        cost more than the arithmetic). The same arithmetic in the same order, so the same floats:
        ``tests/core/test_pricer.py`` checks it against :meth:`step_seconds`."""
        cost, block_size = self.cost, self.block_size
        lin, att, w, kv, _ = cost._k
        overhead = cost.overhead_s

        def step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks) -> float:
            tokens = prefill_tokens + decode_tokens
            compute = lin * tokens + att * (prefill_pairs + decode_pairs)
            memory = w * (tokens > 0) + kv * (decode_pairs + tokens)
            t = (compute if compute > memory else memory) + overhead
            if swapped_blocks:
                t += cost.swap_seconds(swapped_blocks, block_size if block_size is not None else cost._block_size())
            return t
        return step_seconds


def cost_model(gpu: str = DEFAULT_GPU, model: str = DEFAULT_MODEL, gpus: int | str | None = None,
               **kwargs) -> CostModel:
    """A :class:`CostModel` from preset keys.

    Args:
        gpu, model: keys of :data:`GPUS` and of the model presets.
        gpus: tensor-parallel GPU count, or None / "auto" for the fewest (1, 2, 4 or 8) whose memory
            holds the weights and the reserve with room left for a KV cache of at least one
            full context window of the model (:func:`min_gpus`).
        kwargs: passed to :class:`CostModel` (overhead_s, transfer_latency_s, reserve_fraction).

    Raises:
        FieldError: an unknown ``gpu`` or ``model``, a bad ``gpus``, or a model that fits no
            offered GPU count (``gpus``).
    """
    g, m = gpu_preset(gpu), timed_model(model)
    if isinstance(gpus, str) and gpus.strip().isdigit():
        gpus = int(gpus)                                    # "4" from a command line or a URL
    if gpus is None or gpus == "auto":
        gpus = min_gpus(g, m, kwargs.get("reserve_fraction", DEFAULT_RESERVE_FRACTION))
    else:
        gpus = whole_number("gpus", gpus, 1)
    return CostModel(g, m, gpus, **kwargs)


def min_gpus(gpu: GPU, model: ModelConfig, reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    """Fewest GPUs of :data:`GPU_COUNTS` whose memory, less the weights and the reserve, holds the
    KV cache of one full context window of the model (``max_context`` tokens).

    Raises:
        FieldError (``gpus``): not even 8 are enough.
    """
    need = model.bytes_per_token * max(model.max_context, 1)
    for n in GPU_COUNTS:
        free = gpu.memory_bytes * n * (1 - reserve_fraction) - weight_bytes(model)
        if free >= need:
            return n
    raise FieldError("gpus", f": {model.short or model.key} does not fit even {GPU_COUNTS[-1]} x {gpu.label}")


def describe(cost: CostModel) -> list[dict]:
    """The cost model's inputs as table rows {"quantity", "value", "source"} (for the page's
    "what the model assumes" table and the CLI): the GPU's datasheet figures, the model's shape,
    weights, KV bytes per token and KV pool, and the model's own assumptions."""
    from allocator.common.formats import format_bytes
    g, m, n = cost.gpu, cost.model, cost.gpus
    each = "" if n == 1 else f" ({n} GPUs together)"
    rows = [
        {"quantity": "GPU", "value": f"{n} x {g.label}" if n > 1 else g.label, "source": g.source},
        {"quantity": "peak dense fp16/bf16 tensor throughput" + each, "value": f"{cost.peak_flops / 1e12:,.1f} TFLOP/s",
         "source": "datasheet"},
        {"quantity": "memory bandwidth" + each, "value": f"{cost.hbm_bytes_per_s / 1e9:,.0f} GB/s", "source": "datasheet"},
        {"quantity": f"host link ({g.host_link}, one direction)" + each,
         "value": f"{cost.host_link_bytes_per_s / 1e9:,.0f} GB/s", "source": "datasheet (half of both directions)"},
        {"quantity": "device memory" + each, "value": format_bytes(cost.memory_bytes), "source": "datasheet"},
        {"quantity": "model", "value": m.label, "source": m.source},
        {"quantity": "parameters", "value": f"{m.params:,}", "source": "the model's published configuration"},
        {"quantity": "weights", "value": format_bytes(weight_bytes(m)),
         "source": f"parameters x {m.bytes_per_element} bytes ({m.dtype})"},
        {"quantity": "KV cache per token", "value": format_bytes(m.bytes_per_token),
         "source": "the Capacity page's arithmetic: layers x KV heads x head dim x bytes x 2"},
        {"quantity": "reserve (activations, CUDA context)", "value": f"{100 * cost.reserve_fraction:g} % of memory",
         "source": "vLLM's default gpu_memory_utilization = 0.9"},
    ]
    try:
        rows.append({"quantity": "KV pool", "value": f"{format_bytes(cost.kv_pool_bytes())} = {cost.pool_slots():,} slots",
                     "source": "memory - weights - reserve, / KV bytes per token"})
    except FieldError as exc:
        rows.append({"quantity": "KV pool", "value": "none", "source": str(exc)})
    rows += [
        {"quantity": "overhead per step", "value": f"{cost.overhead_s * 1e3:g} ms",
         "source": "assumption of this model (scheduling, launches, sampling)"},
        {"quantity": "latency per host copy", "value": f"{cost.transfer_latency_s * 1e6:g} µs",
         "source": f"assumption of this model; {transfers_per_block(m)} copies per swapped block (K and V per layer)"},
    ]
    return rows
