"""KV-cache bytes from a model's published config.json, factor by factor, and what changes them.

The lesson's one formula (:func:`allocator.accounting.models.kv_bytes_per_token`) keeps every
token's K and V in every layer at 16 bits. Models served today change each factor:

* **grouped-query attention (GQA)**: several query heads share one K/V head, so the cache holds
  ``kv_heads`` heads per layer, not ``heads`` (Ainslie et al., "GQA", EMNLP 2023);
* **multi-head latent attention (MLA)**: DeepSeek-V2/V3 cache one compressed latent of
  ``kv_lora_rank`` numbers plus one shared rotary key of ``qk_rope_head_dim`` numbers per token
  per layer, instead of K and V for every head: no factor 2 and no head count (DeepSeek-V2,
  arXiv:2405.04434, section 2.1; DeepSeek-V3, arXiv:2412.19437, section 2.1.1);
* **sliding-window layers**: a windowed layer attends only to the last ``sliding_window`` tokens,
  so its memory stops growing there: for a sequence of n tokens it holds min(n, window) tokens
  (gpt-oss alternates windowed and full layers; vLLM's hybrid KV-cache manager frees a windowed
  layer's blocks once they fall wholly outside the window, vllm/v1/core/single_type_kv_cache_manager.py);
* **FP8 KV cache** (vLLM ``kv_cache_dtype=fp8``): 1 byte per element instead of 2. vLLM scales
  per tensor only: each attention layer keeps one float32 scale for K and one for V
  (vllm/model_executor/layers/quantization/kv_cache.py, "Only support per-tensor scaling factor
  for fp8 KV cache"; vllm/attention/layer.py registers them as ``_k_scale`` and ``_v_scale``).
  That is 8 bytes per layer for the whole model, nothing per token or per sequence
  (:data:`FP8_SCALE_BYTES_PER_LAYER`).

The configs are the JSON files under ``assets/model_configs/`` (their README gives each model's
source URL, the date read and the hand computation of its bytes per token). Units: bytes,
tokens, slots (one token in one layer group's pages) and blocks of ``block_size`` slots; every
count of sequences is a floor computed in integers.

Bad input raises :class:`allocator.common.errors.FieldError` naming the field (``"model"`` for an
unknown or damaged config, ``"kv_cache_dtype"``, ``"scheme"``, and the capacity fields of
:func:`allocator.accounting.memory.capacity`).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from functools import lru_cache

from allocator.common.errors import FieldError
from allocator.common.limits import LIMITS
from allocator.common.paths import ASSETS
from allocator.common.validate import real_number, whole_number

#: Where the shipped configs live (one JSON file per model, named ``<key>.json``).
CONFIG_DIR = os.path.join(ASSETS, "model_configs")
#: The models shipped, in the order the page lists them (keys are the CLI's ``--model`` values).
CONFIG_KEYS = ("llama3.1-8b", "llama3.1-70b", "qwen3-32b", "deepseek-v3", "gpt-oss-120b")
#: KV-cache element types: vLLM's ``kv_cache_dtype`` values this lesson prices. ``auto`` is the
#: model's own dtype (bf16 for every shipped config); ``fp8`` is 1 byte per element.
KV_CACHE_DTYPES = ("auto", "fp8")
#: Bytes per element of each dtype name a config may give.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
#: The scales vLLM keeps for an FP8 KV cache: one float32 for K and one for V per attention layer
#: (per-tensor scaling), 2 x 4 bytes. Held with the model, not in the KV pool, and not per token.
FP8_SCALE_BYTES_PER_LAYER = 8
#: The attention layouts compared: one K/V head per query head, the config's own K/V heads, a latent.
SCHEMES = ("mha", "gqa", "mla")
SCHEME_NAMES = {"mha": "MHA", "gqa": "GQA", "mla": "MLA"}


@dataclass(frozen=True)
class ModelKV:
    """The KV-cache shape of one model, read from its config.json.

    Attributes:
        key, name: the CLI's ``--model`` value and the name shown.
        source, read: the published config.json's URL and the date its values were read.
        unconfirmed: field -> why it could not be confirmed (shown beside the figures).
        layers: attention layers (``num_hidden_layers``).
        heads, kv_heads: query heads and K/V heads (``num_attention_heads``,
            ``num_key_value_heads``).
        k_head_dim, v_head_dim: numbers per head in K and in V. ``head_dim`` (or
            ``hidden_size / heads``) for both, except under MLA, where a decompressed K head is
            ``qk_nope_head_dim + qk_rope_head_dim`` and a V head ``v_head_dim``.
        kv_lora_rank, qk_rope_head_dim: MLA's latent width and shared rotary key width (0 when the
            model has no MLA).
        window_layers: how many layers attend through a sliding window (``layer_types``).
        sliding_window: that window, tokens (0: none).
        dtype, bytes_per_element: the model's dtype (``torch_dtype``) and its size.
        max_context: ``max_position_embeddings``, tokens.
    """

    key: str
    name: str
    source: str
    read: str
    unconfirmed: dict
    layers: int
    heads: int
    kv_heads: int
    k_head_dim: int
    v_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    window_layers: int
    sliding_window: int
    dtype: str
    bytes_per_element: int
    max_context: int

    @property
    def scheme(self) -> str:
        """The model's own attention layout: ``"mla"`` (a latent), ``"gqa"`` (fewer K/V heads than
        query heads) or ``"mha"``."""
        if self.kv_lora_rank:
            return "mla"
        return "gqa" if self.kv_heads < self.heads else "mha"

    @property
    def full_layers(self) -> int:
        """Layers that keep every token (``layers - window_layers``)."""
        return self.layers - self.window_layers


def _field(config: dict, name: str, key: str, low: int = 1, default=None) -> int:
    value = config.get(name, default)
    try:
        return whole_number("model", value, low, 1 << 20)
    except FieldError:
        raise FieldError("model", f" {key}: field {name} = {value!r} in assets/model_configs/{key}.json "
                         "is not a whole number in range", subject="model") from None


def _parse(key: str, data: dict) -> ModelKV:
    """One config file's dict -> :class:`ModelKV` (FieldError ``model`` naming the file and field)."""
    c = data.get("config")
    if not isinstance(c, dict):
        raise FieldError("model", f" {key}: assets/model_configs/{key}.json has no \"config\" object",
                         subject="model")
    layers = _field(c, "num_hidden_layers", key)
    heads = _field(c, "num_attention_heads", key)
    kv_heads = _field(c, "num_key_value_heads", key, default=heads)
    rank = _field(c, "kv_lora_rank", key, 0, 0)
    rope = _field(c, "qk_rope_head_dim", key, 0, 0)
    if rank:
        k_dim = _field(c, "qk_nope_head_dim", key) + rope
        v_dim = _field(c, "v_head_dim", key)
    else:
        hidden = c.get("hidden_size")
        head_dim = c.get("head_dim") or (hidden // heads if isinstance(hidden, int) else None)
        k_dim = v_dim = _field({"head_dim": head_dim}, "head_dim", key)
    types = c.get("layer_types")
    window = _field(c, "sliding_window", key, 0, 0) if c.get("sliding_window") is not None else 0
    if types is None:
        window_layers = layers if (window and c.get("use_sliding_window", True)) else 0
    else:
        if not isinstance(types, list) or len(types) != layers or \
                not set(types) <= {"full_attention", "sliding_attention"}:
            raise FieldError("model", f" {key}: layer_types in assets/model_configs/{key}.json must list "
                             f"{layers} entries, each full_attention or sliding_attention", subject="model")
        window_layers = types.count("sliding_attention")
    if not window:
        window_layers = 0
    dtype = c.get("torch_dtype", "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise FieldError("model", f" {key}: torch_dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}",
                         subject="model")
    return ModelKV(key=key, name=str(data.get("name", key)), source=str(data.get("source", "")),
                   read=str(data.get("read", "")), unconfirmed=dict(data.get("unconfirmed", {})),
                   layers=layers, heads=heads, kv_heads=kv_heads, k_head_dim=k_dim, v_head_dim=v_dim,
                   kv_lora_rank=rank, qk_rope_head_dim=rope, window_layers=window_layers,
                   sliding_window=window, dtype=dtype, bytes_per_element=DTYPE_BYTES[dtype],
                   max_context=_field(c, "max_position_embeddings", key))


@lru_cache(maxsize=None)
def model_kv(key: str) -> ModelKV:
    """The shipped config ``assets/model_configs/<key>.json`` as a :class:`ModelKV`.

    Raises:
        FieldError: field ``model`` for a key that is not in :data:`CONFIG_KEYS`, or a file that is
            missing, not JSON, or lacks a field (the message names the file and the field).
    """
    if key not in CONFIG_KEYS:
        raise FieldError("model", f" = {key!r} is not a shipped model config; choose one of "
                         f"{', '.join(CONFIG_KEYS)}")
    path = os.path.join(CONFIG_DIR, f"{key}.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise FieldError("model", f" {key}: assets/model_configs/{key}.json could not be read "
                         f"({type(exc).__name__}); reinstall the project's assets", subject="model") from None
    return _parse(key, data)


def kv_dtype_bytes(model: ModelKV, kv_cache_dtype: str) -> int:
    """Bytes per element for ``kv_cache_dtype`` (``auto``: the model's own; ``fp8``: 1).

    Raises:
        FieldError: field ``kv_cache_dtype`` for any other value.
    """
    if kv_cache_dtype == "auto":
        return model.bytes_per_element
    if kv_cache_dtype == "fp8":
        return 1
    raise FieldError("kv_cache_dtype", f" = {kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")


def elements_per_layer(model: ModelKV, scheme: str) -> int | None:
    """Numbers cached per token in one layer under ``scheme``, or None where it does not apply.

    * ``mha``: heads x (k_head_dim + v_head_dim) -- one K/V head per query head;
    * ``gqa``: kv_heads x (k_head_dim + v_head_dim) -- the config's own K/V heads (for a model
      whose K and V heads are ``head_dim`` wide, kv_heads x head_dim x 2);
    * ``mla``: kv_lora_rank + qk_rope_head_dim -- one latent and one shared rotary key, no factor 2
      and no heads; None for a model without ``kv_lora_rank`` (its weights have no latent to cache).

    Raises:
        FieldError: field ``scheme`` for a scheme not in :data:`SCHEMES`.
    """
    if scheme == "mha":
        return model.heads * (model.k_head_dim + model.v_head_dim)
    if scheme == "gqa":
        return model.kv_heads * (model.k_head_dim + model.v_head_dim)
    if scheme == "mla":
        return (model.kv_lora_rank + model.qk_rope_head_dim) if model.kv_lora_rank else None
    raise FieldError("scheme", f" = {scheme!r} is not one of {', '.join(SCHEMES)}")


def fp8_scale_bytes(model: ModelKV) -> int:
    """The FP8 KV cache's scales for the whole model, bytes: layers x 8 (one float32 K scale and one
    V scale per attention layer, :data:`FP8_SCALE_BYTES_PER_LAYER`). Not per token: DeepSeek-V3's
    61 layers keep 488 bytes of scales in all."""
    return model.layers * FP8_SCALE_BYTES_PER_LAYER


@dataclass(frozen=True)
class KVVariant:
    """One way of caching a model's K and V, priced for one memory budget (all integers are bytes,
    tokens, slots or sequences; see :func:`kv_variant`).

    Attributes:
        change: what differs from the model as configured (``"as configured"``, ``"mha"``,
            ``"gqa"``, ``"mla"``, ``"dtype"``, ``"no window"``).
        scheme, kv_cache_dtype, bytes_per_element, windowed: the variant's layout, dtype, element
            size and whether its sliding-window layers stop at the window.
        elements_per_layer: numbers cached per token per layer.
        bytes_per_token: elements_per_layer x layers x bytes_per_element -- every layer keeping
            every token.
        full_bytes_per_token, window_bytes_per_token: the same split between the layers that keep
            every token and the windowed ones (window_bytes_per_token is 0 without windows).
        window: the window, tokens (0 without windows).
        reserved_bytes: reserve-max per sequence, full x max_context + window x min(max_context,
            window).
        used_bytes: what a sequence of ``mean_tokens`` stores, full x mean + window x min(mean,
            window).
        paged_slots, window_paged_slots: slots a paged sequence holds in a full layer
            (ceil(mean / block) x block) and in a windowed one (at most ceil((window - 1) / block)
            + 1 blocks: the window's tokens straddle one more block unless they start on a
            boundary, and the blocks before them are freed).
        paged_bytes: full x paged_slots + window x window_paged_slots.
        fit_reserve, fit_paged: floor(free / reserved_bytes), floor(free / paged_bytes).
    """

    change: str
    scheme: str
    kv_cache_dtype: str
    bytes_per_element: int
    windowed: bool
    elements_per_layer: int
    bytes_per_token: int
    full_bytes_per_token: int
    window_bytes_per_token: int
    window: int
    reserved_bytes: int
    used_bytes: float
    paged_slots: int
    window_paged_slots: int
    paged_bytes: int
    fit_reserve: int
    fit_paged: int

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)


def window_paged_slots(mean_tokens: float, window: int, block_size: int) -> int:
    """Slots a windowed layer's pages hold for a sequence of ``mean_tokens`` (block_size each):
    ceil(mean / block) blocks while the sequence fits in the window, and at most
    ceil((window - 1) / block) + 1 blocks after (``window`` tokens in a row touch that many blocks
    when they do not start on a block boundary; blocks wholly before the window are freed, as
    vLLM's sliding-window manager does). 128-token window, blocks of 16: 9 blocks = 144 slots.
    """
    blocks = math.ceil(mean_tokens / block_size)
    if window:
        blocks = min(blocks, math.ceil((window - 1) / block_size) + 1)
    return blocks * block_size


def kv_variant(model: ModelKV, scheme: str, kv_cache_dtype: str, windowed: bool, free_bytes: object,
               max_context: object, mean_tokens: object, block_size: object, change: str = "") -> KVVariant:
    """Price one way of caching ``model``'s K and V: bytes per token and per sequence, and the
    sequences that fit in ``free_bytes`` reserving ``max_context`` tokens or paging a sequence of
    ``mean_tokens`` in blocks of ``block_size``.

    Formulas (bytes): per token and layer, elements_per_layer(scheme) x bytes_per_element; a full
    layer holds n tokens, a windowed one min(n, window); reserve-max sets aside max_context tokens
    per full layer; paging holds ceil(mean / block) blocks per full layer and
    :func:`window_paged_slots` per windowed one. With ``windowed`` False every layer is counted as
    full (what the same model would hold without its windows). For a model without windows the
    results equal :func:`allocator.accounting.memory.capacity` with bytes_per_token =
    :attr:`KVVariant.bytes_per_token`.

    Raises:
        FieldError: ``scheme`` (unknown, or ``mla`` for a model without a latent),
            ``kv_cache_dtype``, ``free_bytes``, ``max_context``, ``mean_tokens`` (not above 0 or
            above max_context) or ``block_size``.
    """
    bpe = kv_dtype_bytes(model, kv_cache_dtype)
    elements = elements_per_layer(model, scheme)
    if elements is None:
        raise FieldError("scheme", f" = 'mla' does not apply to {model.name}: its config has no kv_lora_rank")
    free = whole_number("free_bytes", free_bytes, 0, int(LIMITS["free_gib"].high) << 30)
    max_ctx = whole_number("max_context", max_context, 1, int(LIMITS["max_context"].high))
    mean = real_number("mean_tokens", mean_tokens, 0, above=0)
    if mean > max_ctx:
        raise FieldError("mean_tokens", f" = {mean:g} is above max_context ({max_ctx} tokens): no sequence "
                         "can use more than it reserves")
    bs = whole_number("block_size", block_size, 1, int(LIMITS["block_size"].high))
    per_layer = elements * bpe
    window = model.sliding_window if windowed else 0
    window_layers = model.window_layers if window else 0
    full = per_layer * (model.layers - window_layers)
    win = per_layer * window_layers
    reserved = full * max_ctx + win * min(max_ctx, window)
    used = full * mean + win * min(mean, window)
    slots = math.ceil(mean / bs) * bs
    wslots = window_paged_slots(mean, window, bs) if window else 0
    paged = full * slots + win * wslots
    return KVVariant(change=change or "as configured", scheme=scheme, kv_cache_dtype=kv_cache_dtype,
                     bytes_per_element=bpe, windowed=bool(window), elements_per_layer=elements,
                     bytes_per_token=per_layer * model.layers, full_bytes_per_token=full,
                     window_bytes_per_token=win, window=window, reserved_bytes=reserved, used_bytes=used,
                     paged_slots=slots, window_paged_slots=wslots, paged_bytes=paged,
                     fit_reserve=free // reserved, fit_paged=free // paged)


def kv_alternatives(model: ModelKV, kv_cache_dtype: str, free_bytes: object, max_context: object,
                    mean_tokens: object, block_size: object) -> list[KVVariant]:
    """The model as configured, then each alternative that changes one factor from it.

    Rows, in order: ``as configured`` (its own layout, ``kv_cache_dtype``, its windows); each other
    layout of :data:`SCHEMES` that applies (``gqa`` is left out where the config has one K/V head per
    query head, since it equals ``mha``; ``mla`` only for a model with a latent); the other dtype
    (``auto`` <-> ``fp8``, change ``"dtype"``); and, for a model with sliding-window layers, the same
    model with every layer full (change ``"no window"``).

    Raises:
        FieldError: as :func:`kv_variant`.
    """
    own = model.scheme
    windowed = model.window_layers > 0
    rows = [kv_variant(model, own, kv_cache_dtype, windowed, free_bytes, max_context, mean_tokens, block_size)]
    for scheme in SCHEMES:
        if scheme == own or elements_per_layer(model, scheme) is None:
            continue
        if scheme == "gqa" and model.kv_heads == model.heads:
            continue
        rows.append(kv_variant(model, scheme, kv_cache_dtype, windowed, free_bytes, max_context, mean_tokens,
                               block_size, change=scheme))
    other = "fp8" if kv_cache_dtype == "auto" else "auto"
    rows.append(kv_variant(model, own, other, windowed, free_bytes, max_context, mean_tokens, block_size,
                           change="dtype"))
    if windowed:
        rows.append(kv_variant(model, own, kv_cache_dtype, False, free_bytes, max_context, mean_tokens,
                               block_size, change="no window"))
    return rows
