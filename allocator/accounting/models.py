"""Bytes per token (one slot) from a model's KV-cache shape, and the lesson's preset models.

One slot holds one token's K and V in every layer: layers x kv_heads x head_dim x
bytes_per_element x 2 bytes. Sources: Kwon et al., "Efficient Memory Management for Large
Language Model Serving with PagedAttention", SOSP 2023, section 3 (OPT-13B: "800 KB" = 819,200
bytes = 800 KiB per token); ``assets/reference_figures.md`` R5 (7B fp16: "512 KB" = 512 KiB
per token) and R6 (Llama 3 70B: 320 KiB per slot). Byte units are binary (see :mod:`allocator.accounting.units`).

Bad input raises :class:`allocator.common.validate.FieldError` with ``.field`` ``"layers"``,
``"kv_heads"``, ``"head_dim"``, ``"bytes_per_element"`` or ``"model"``.
"""
from __future__ import annotations

from dataclasses import dataclass

from allocator.common.limits import LIMITS
from allocator.common.errors import FieldError
from allocator.common.validate import whole_number


def kv_bytes_per_token(layers: object, kv_heads: object, head_dim: object,
                       bytes_per_element: object) -> int:
    """Bytes of KV cache for one token (one slot): layers x kv_heads x head_dim x bytes x 2.

    The factor 2 counts K and V. Source: Kwon et al. 2023 (PagedAttention), section 3;
    ``assets/reference_figures.md`` R5 (7B fp16: 512 KiB) and R6 (Llama 3 70B: 320 KiB).

    Parameters
    ----------
    layers, kv_heads : whole numbers 1 .. 1,024 (kv_heads is the number of K/V heads,
        smaller than the query heads under grouped-query attention).
    head_dim : whole number 1 .. 16,384.
    bytes_per_element : whole number 1 .. 8 (2 for fp16/bf16, 1 for fp8, 4 for fp32).

    Returns
    -------
    int, bytes (binary units elsewhere: divide by :data:`~allocator.accounting.units.KIB` for
    KiB).

    Raises
    ------
    FieldError with field ``layers``, ``kv_heads``, ``head_dim`` or ``bytes_per_element``.
    """
    product = 2
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("bytes_per_element", bytes_per_element)):
        product *= whole_number(name, value, 1, int(LIMITS[name].high))
    return product


@dataclass(frozen=True)
class ModelConfig:
    """A model's KV-cache shape: ``layers``, ``kv_heads``, ``head_dim``, ``bytes_per_element``
    (2 = fp16/bf16), plus a display ``label`` (long) and ``short`` name, and the ``source`` of
    its figure.

    The cost model (:mod:`allocator.cost.timing`) also needs ``hidden_size`` (the residual width),
    ``heads`` (query heads; ``kv_heads`` is smaller under grouped-query attention),
    ``params`` (parameter count, for the 2 FLOPs per parameter per token and the weight bytes)
    and ``max_context`` (the model's context window, tokens); 0 means "not given" (a custom
    shape on the Capacity page needs none of them).
    """

    key: str
    label: str
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: int
    dtype: str
    source: str = ""
    short: str = ""
    hidden_size: int = 0
    heads: int = 0
    params: int = 0
    max_context: int = 0

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token (slot), K and V across all layers; see :func:`kv_bytes_per_token`."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim,
                                  self.bytes_per_element)


#: Preset models (keys are the CLI's ``--model`` values). Shapes and parameter counts come from
#: the models' published configurations: OPT-13B from Zhang et al., "OPT: Open Pre-trained
#: Transformer Language Models", 2022, Table 1 (40 layers, 40 heads, d_model 5,120, context
#: 2,048; 12,853,473,280 parameters counted from that shape: a 50,272-token embedding tied to
#: the output layer, 2,050 learned positions, and per layer four 5,120 x 5,120 attention
#: projections, a 20,480-wide feed-forward pair and two layer norms, all with biases);
#: the 7B preset is Llama 2 7B's shape (Touvron et al., "Llama 2", 2023: 32 layers, 32 heads,
#: hidden 4,096, context 4,096; 6,738,415,616 parameters); Llama 3 8B and 70B from Meta's
#: Llama 3 model cards and config.json (8B: 32 layers, 32 heads, 8 KV heads, hidden 4,096,
#: 8,030,261,248 parameters; 70B: 80 layers, 64 heads, 8 KV heads, hidden 8,192,
#: 70,553,706,496 parameters; both context 8,192).
PRESETS: dict[str, ModelConfig] = {
    "7b-fp16": ModelConfig("7b-fp16", "7B, fp16, no GQA (32 layers x 32 heads x 128; Llama 2 7B's shape)",
                           32, 32, 128, 2, "fp16",
                           "the lesson's reference figure R5: 512 KiB per token (the lesson writes 512 KB)",
                           "7B fp16, no GQA",
                           hidden_size=4096, heads=32, params=6_738_415_616, max_context=4096),
    "llama3-8b": ModelConfig("llama3-8b", "Llama 3 8B, bf16, GQA (32 layers x 8 KV heads x 128)",
                             32, 8, 128, 2, "bf16",
                             "Meta Llama 3 8B config.json: 32 layers, 8 KV heads, head dim 128",
                             "Llama 3 8B bf16, GQA",
                             hidden_size=4096, heads=32, params=8_030_261_248, max_context=8192),
    "llama3-70b": ModelConfig("llama3-70b", "Llama 3 70B, bf16, GQA (80 layers x 8 KV heads x 128)",
                              80, 8, 128, 2, "bf16", "the lesson's reference figure R6: 320 KiB per slot",
                              "Llama 3 70B bf16, GQA",
                              hidden_size=8192, heads=64, params=70_553_706_496, max_context=8192),
    "opt-13b": ModelConfig("opt-13b", "OPT-13B, fp16 (40 layers x 40 heads x 128)",
                           40, 40, 128, 2, "fp16",
                           "Kwon et al. 2023: 800 KB (= 819,200 bytes = 800 KiB) per token",
                           "OPT-13B fp16",
                           hidden_size=5120, heads=40, params=12_853_473_280, max_context=2048),
}


def model_config(key: str) -> ModelConfig:
    """Return the preset named ``key`` (one of :data:`PRESETS`).

    Raises
    ------
    FieldError with field ``model`` for any other key.
    """
    try:
        return PRESETS[key]
    except (KeyError, TypeError):
        raise FieldError("model", f" = {key!r} is not a preset; choose one of "
                         f"{', '.join(PRESETS)}") from None
