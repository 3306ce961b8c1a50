"""The best cost model the lab holds for a GPU and a model: the operator profile where one was
measured, the datasheet roofline everywhere else -- and, beside every seconds figure, which.

The pages that show seconds (the explainer, Throughput, Prefix cache) and the CLI commands that
print them (``simulate --time``, ``rate-sweep``, ``prefix-sweep``) call :func:`best_cost_model`.
It returns

* a :class:`ProfiledCostModel` when ``assets/llm_profiles/`` holds an operator profile of a model
  with the chosen model's layer shapes on the chosen GPU at the chosen tensor-parallel degree
  (:mod:`allocator.cost.profile`; the replay of a real vLLM run on the real-engine page measures
  its error there: within about 1 % on the mean latencies, where the roofline runs 25-60 % fast);
* the roofline :class:`allocator.cost.roofline.CostModel` otherwise -- with :attr:`why` saying why
  no profile applies, so a page can say it.

A profile times operators of a *shape*: a bundle profiled for Llama 3.1 8B prices the lab's
Llama 3 8B preset too, because the two share every layer's shape (32 layers, 32 query and 8 KV
heads of 128, hidden 4,096, feed-forward 14,336, vocabulary 128,256, 8,030,261,248 parameters;
Meta's config.json files); they differ only in the rotary embedding's scaling, which changes
values, not work. :func:`profile_model_for` matches on shape, never on a name.

What the profile cannot price is priced as the roofline prices it, and said so: swap copies over
the host link (vLLM v1 never swaps, so no profile holds them; :meth:`CostModel.swap_seconds`),
the KV pool's size (the GPU's datasheet memory less weights and reserve: the same for both
models, so a page's pool does not change with the choice) and the recompute FLOPs figure (the
recomputed tokens' weight FLOPs at the datasheet's peak, named so where it is shown).
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

from allocator.common.errors import FieldError
from allocator.cost.calibration import REPLAY_MODELS, ServedModel
from allocator.cost.profile import ProfileCost, ProfileGridWarning
from allocator.cost.roofline import GPU_COUNTS, CostModel, cost_model
from allocator.accounting.models import ModelConfig

#: The choices a page's URL (``cost_model=``) and the CLI (``--cost-model``) accept: ``best`` (the
#: profile where one exists, else the roofline) and ``roofline`` (always the datasheet roofline).
CHOICES = ("best", "roofline")
#: What each choice means, for a control's help and ``--help``.
CHOICE_HELP = {"best": "the operator profile where the lab holds one for this GPU and model, else the "
                       "datasheet roofline",
               "roofline": "the datasheet roofline always (the teaching model: FLOPs over peak, bytes over bandwidth)"}


def _shape(cfg: ModelConfig) -> tuple:
    return (cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.hidden_size, cfg.heads, cfg.params, cfg.bytes_per_element)


def profile_model_for(model: ModelConfig) -> ServedModel | None:
    """The profiled model (:data:`allocator.cost.calibration.REPLAY_MODELS`) with ``model``'s layer
    shapes -- layers, query and KV heads, head size, hidden size, parameters, bytes per element --
    or None."""
    for served in REPLAY_MODELS.values():
        if _shape(served.config) == _shape(model):
            return served
    return None


@dataclass(frozen=True)
class ProfiledCostModel(CostModel):
    """A :class:`CostModel` whose steps are priced by an operator profile
    (:class:`allocator.cost.profile.ProfileCost`); its pool, swap copies and datasheet table stay
    the roofline's (the module docstring says why).

    Args (beyond :class:`CostModel`'s):
        profile: the :class:`ProfileCost` for this GPU, model and tensor-parallel degree.

    ``step_seconds`` = the profile's step seconds (its operators, all-reduces and engine overhead,
    :meth:`ProfileCost.step_terms`) + swap copies (:meth:`CostModel.swap_seconds`); a lookup off
    the profiled grid is counted in ``profile.off_grid`` (never warned about per step here: the
    page states the count).
    """

    profile: ProfileCost | None = field(default=None, compare=False, hash=False, repr=False)
    kind = "profile"

    def __post_init__(self):
        super().__post_init__()
        if self.profile is None:
            raise FieldError("cost_model", ": a profiled cost model needs its operator profile")

    @property
    def priced_by(self) -> str:
        b, served = self.profile.bundle, self.profile.model.config
        gpu = b.meta.get("gpu") or self.gpu.label
        same = "" if served.key == self.model.key else f", the same layer shapes as {self.model.short.split(',')[0]}"
        top = b.attention.largest
        context = int(max(top["kv_decode"], top["kv_prefill"]))
        return (f"the operator profile measured on {gpu} with vLLM {b.meta.get('vllm_version', '?')} for "
                f"{served.short}{same} (per-operator latencies, measured up to {int(top['prefill_chunk']):,} prefill tokens a "
                f"step and {context:,} tokens of context, extrapolated beyond; not the datasheet roofline)")

    @property
    def short_name(self) -> str:
        return "operator profile"

    def profile_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs) -> float:
        """The profile's seconds of one step (no swap), grid departures counted, not warned."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ProfileGridWarning)
            return float(self.profile.step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs))

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks,
                     block_size: int | None = None) -> float:
        """Seconds of one step: :meth:`profile_seconds` + swap copies (roofline-priced)."""
        t = self.profile_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs)
        if swapped_blocks:
            t += self.swap_seconds(swapped_blocks, block_size if block_size is not None else self._block_size())
        return t

    def for_blocks(self, block_size: int | None) -> "BoundProfiledCostModel":
        return BoundProfiledCostModel(self, block_size)


@dataclass(frozen=True)
class BoundProfiledCostModel:
    """A :class:`ProfiledCostModel` bound to a pool's block size (for swap copies); the engine calls
    its ``step_seconds`` (it has no inline ``pricer``: the profile's lookups are the work)."""

    cost: ProfiledCostModel
    block_size: int | None

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks) -> float:
        return self.cost.step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks,
                                      self.block_size)


def best_cost_model(gpu: str, model: str, gpus: int | str | None = None, choice: str = "best") -> CostModel:
    """The cost model a page or command prices seconds with.

    Args:
        gpu, model, gpus: as :func:`allocator.cost.roofline.cost_model` (``gpus`` None or "auto":
            the fewest GPUs that hold the model).
        choice: "best" (:class:`ProfiledCostModel` where a profile applies, else the roofline) or
            "roofline".

    Returns:
        a :class:`CostModel` (``kind`` "roofline", its :attr:`why` the reason no profile applied,
        "" when ``choice`` was "roofline") or a :class:`ProfiledCostModel` (``kind`` "profile").

    Raises:
        FieldError: what :func:`cost_model` raises; ``cost_model`` for an unknown ``choice``.
    """
    if choice not in CHOICES:
        raise FieldError("cost_model", f" = {choice!r} must be one of {', '.join(CHOICES)}")
    roof = cost_model(gpu, model, gpus)
    if choice == "roofline":
        return roof
    served = profile_model_for(roof.model)
    if served is None:
        return roof.with_why(f"the lab holds no operator profile of {roof.model.short}")
    try:
        prof = ProfileCost(roof.gpu, served, roof.gpus)
    except FieldError as exc:
        if exc.field == "tensor_parallel_size":
            return roof.with_why(f"the operator profile of {served.config.short} on {roof.gpu.label} was not "
                                 f"measured at {roof.gpus} GPUs")
        return roof.with_why(f"the lab holds no operator profile of {served.config.short} on {roof.gpu.label}")
    return ProfiledCostModel(roof.gpu, roof.model, roof.gpus, roof.overhead_s, roof.transfer_latency_s,
                             roof.reserve_fraction, profile=prof)


__all__ = ["best_cost_model", "seconds_source", "profiled_pairs", "ProfiledCostModel", "BoundProfiledCostModel", "profile_model_for", "CHOICES",
           "CHOICE_HELP", "GPU_COUNTS"]


def seconds_source(cost) -> str:
    """The words a page puts beside a seconds figure: the GPU and model, and which cost model
    produced the seconds (and, for the roofline chosen for want of a profile, why), e.g. ``"OPT-13B
    fp16 on NVIDIA A100 40GB; seconds from the datasheet roofline (...; no operator profile ...)"``."""
    why = f"; {cost.why}" if getattr(cost, "why", "") else ""
    return f"{cost.label}; seconds from {cost.priced_by}{why}"


@functools.lru_cache(maxsize=1)
def profiled_pairs() -> str:
    """The page presets the operator profile prices, in words (e.g. ``"NVIDIA GeForce RTX 4090 24GB
    with Llama 3 8B bf16 on 1 GPU"``), ``"none"`` when no preset has a profile."""
    from allocator.cost.roofline import GPUS, TIMED_MODELS, timed_model
    out = []
    for g in GPUS:
        for m in TIMED_MODELS:
            served = profile_model_for(timed_model(m))
            if served is None:
                continue
            for n in GPU_COUNTS:
                try:
                    ProfileCost(GPUS[g], served, n)
                except FieldError:
                    continue
                out.append(f"{GPUS[g].label} with {timed_model(m).short.split(',')[0]} on {n} GPU{'s' if n > 1 else ''}")
    return "; ".join(out) or "none"
