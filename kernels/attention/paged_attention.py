"""Paged-attention decode: one new query token per sequence attends to its cached keys/values.

Layout (vLLM's): the KV cache is a pool of physical blocks, each holding ``block_size``
consecutive slots (tokens)::

    q            [num_seqs, num_heads, head_dim]                 fp16, bf16 or fp32
    k_cache      [num_blocks, block_size, num_kv_heads, head_dim] same dtype as q
    v_cache      [num_blocks, block_size, num_kv_heads, head_dim] same dtype as q
    block_tables [num_seqs, max_blocks_per_seq] int32  -- logical block j of sequence s lives in
                                                          physical block block_tables[s, j]
    seq_lens     [num_seqs] int32                     -- tokens in each sequence's cache (>= 0;
                                                          a sequence with none has output 0)
    out          [num_seqs, num_heads, head_dim]     same dtype as q

Token ``t`` of sequence ``s`` is at slot ``t % block_size`` of block
``block_tables[s, t // block_size]``. Table entries past ``ceil(seq_len / block_size)`` are never
read and may hold anything (e.g. -1 padding). Grouped-query attention: query head ``h`` uses KV
head ``h // (num_heads // num_kv_heads)``.

Three implementations, one contract:

* :func:`paged_attention_triton` -- the Triton kernels (compiled on CUDA, interpreted on CPU):
  a single pass, or split-KV with a reduction when the GPU would otherwise sit idle
  (:mod:`kernels.attention.triton_kernels` has the kernels and the launch choice).
* :func:`paged_attention_torch` -- the same gather (index the cache by block table) and
  attention in torch, for CPU timing at realistic sizes.
* :func:`paged_attention_reference` -- gathers every token to a dense tensor by explicit slot
  arithmetic and runs fp32 softmax attention; for tests and the page's check.

The contiguous baseline on the Triton backends is :func:`contiguous_attention_triton`: the same
kernels and launch with the block table compiled out (K/V ``[num_seqs, max_len, num_kv_heads,
head_dim]``, token ``t`` of sequence ``s`` at ``k[s, t]``). For the torch path,
:func:`make_contiguous` stores each sequence as one block of the maximum length, so the same
function runs on it and differs from the paged run only in where the gather reads.

Input checks live in :mod:`kernels.attention.validation` and test inputs (paged from dense tokens) in
:mod:`kernels.attention.inputs`; both are re-exported here. Sources: Kwon et al., PagedAttention (SOSP
2023, arXiv:2309.06180), section 4.1 (the PagedAttention algorithm); vLLM ``csrc/attention``
and ``vllm/attention/ops/paged_attn.py`` for the layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from allocator.common.mathutils import cdiv, round_up
from kernels.attention.backend import BACKENDS, detect
from allocator.common.errors import FieldError
from kernels.attention.inputs import (TABLE_COLUMN_MULTIPLE, make_paged_inputs)
from kernels.attention.triton_kernels import HAVE_TRITON, LOG2E, LaunchConfig, choose_config, next_pow2
from kernels.attention.validation import validate_contiguous, validate_inputs

#: Largest head_dim the Triton kernels take (the tile is padded to the next power of two).
MAX_HEAD_DIM = 256


# --------------------------------------------------------------------------------------------
# Triton
# --------------------------------------------------------------------------------------------

def _num_sms(device: torch.device) -> int | None:
    """Streaming multiprocessors of a CUDA device (None on the CPU: the interpreter)."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def launch_config(q: torch.Tensor, k_cache: torch.Tensor, seq_lens: torch.Tensor, **overrides) -> LaunchConfig:
    """The :class:`~kernels.attention.triton_kernels.LaunchConfig` a call with these inputs would use.

    ``overrides``: ``num_splits``, ``tile``, ``num_warps``, ``num_stages`` (None = choose).
    Reads ``max(seq_lens)`` on the host (a device sync on CUDA); timing loops compute the
    config once and pass it as ``config=``.
    """
    max_len = int(seq_lens.max()) if seq_lens.numel() else 1
    return choose_config(q.shape[0], k_cache.shape[2], max_len, q.shape[2], num_sms=_num_sms(q.device),
                         itemsize=k_cache.element_size(), num_heads=q.shape[1],
                         **{k: v for k, v in overrides.items() if v is not None})


def paged_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor,
                           scale: float | None = None, validate: bool = True,
                           out: torch.Tensor | None = None, *, num_splits: int | None = None,
                           tile: int | None = None, num_warps: int | None = None, num_stages: int | None = None,
                           config: LaunchConfig | None = None) -> torch.Tensor:
    """Run the Triton paged-attention decode (compiled on CUDA, interpreted on CPU).

    Args:
        q, k_cache, v_cache, block_tables, seq_lens: see the module docstring for shapes/dtypes.
        scale: softmax scale; default ``1 / sqrt(head_dim)``.
        validate: run :func:`validate_inputs` first (a host sync); timing loops pass False.
        out: optional preallocated ``[num_seqs, num_heads, head_dim]`` output in q's dtype.
        num_splits: 1 = single pass; n > 1 = split-KV into n stretches plus a reduction; None
            chooses (split when the single pass would leave SMs idle or the context is long;
            never on the CPU interpreter unless asked).
        tile, num_warps, num_stages: override the per-head_dim defaults
            (:func:`kernels.attention.triton_kernels.default_tiling`).
        config: a ready :class:`LaunchConfig` (skips the choice and its host sync).

    Returns:
        ``out`` [num_seqs, num_heads, head_dim], q's dtype. A sequence with 0 tokens gives 0.

    Raises:
        FieldError: from :func:`validate_inputs`; ``head_dim`` above 256; a bad tile, warp,
            stage or split count.
        RuntimeError: if Triton is not installed.
    """
    if validate:
        validate_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    return _launch(q, k_cache, v_cache, block_tables, seq_lens, scale, out, paged=True, num_splits=num_splits,
                   tile=tile, num_warps=num_warps, num_stages=num_stages, config=config)


def contiguous_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: torch.Tensor,
                                scale: float | None = None, validate: bool = True, out: torch.Tensor | None = None,
                                *, num_splits: int | None = None, tile: int | None = None,
                                num_warps: int | None = None, num_stages: int | None = None,
                                config: LaunchConfig | None = None) -> torch.Tensor:
    """The contiguous baseline: the same Triton kernels with the block table compiled out.

    Each sequence's keys and values are one run of memory, ``k[s, t]`` for token ``t`` of
    sequence ``s``; the kernel computes the address from ``s`` and ``t`` and never reads a block
    table. Tiles, warps, stages, split choice and arithmetic are those of
    :func:`paged_attention_triton` for the same shape, so paged time / contiguous time is the
    cost of the indirection and nothing else.

    Args:
        q: [num_seqs, num_heads, head_dim]; k, v: [num_seqs, max_len, num_kv_heads, head_dim];
            seq_lens: int32 [num_seqs] (each <= max_len). Other arguments as
            :func:`paged_attention_triton`.

    Returns:
        [num_seqs, num_heads, head_dim] in q's dtype (0 for an empty sequence).

    Raises:
        FieldError: from :func:`validate_contiguous`; as :func:`paged_attention_triton`.
        RuntimeError: if Triton is not installed.
    """
    if validate:
        validate_contiguous(q, k, v, seq_lens)
    return _launch(q, k, v, None, seq_lens, scale, out, paged=False, num_splits=num_splits, tile=tile,
                   num_warps=num_warps, num_stages=num_stages, config=config)


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch, as data: which ``@triton.jit`` function, its grid, its arguments.

    ``args`` are the positional arguments (tensors, ints, floats) and ``constexprs`` the
    compile-time keywords, exactly as passed at launch; :mod:`kernels.compile_check` compiles the
    same list for sm_90 offline, so what it checks is what runs.
    """

    kernel: str
    grid: tuple[int, ...]
    args: tuple
    constexprs: dict
    num_warps: int
    num_stages: int


def launch_plan(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor | None,
                seq_lens: torch.Tensor, cfg: LaunchConfig, out: torch.Tensor, scale: float | None = None,
                part_acc: torch.Tensor | None = None, part_ml: torch.Tensor | None = None) -> list[KernelLaunch]:
    """The launches of one call (one single pass, or split-KV then the reduction); launches nothing.

    ``block_tables`` None: the contiguous baseline (``k_cache`` is [num_seqs, max_len, ...]).
    Works on ``meta`` tensors too (shapes, strides and dtypes only), which is how the offline
    compile enumerates configurations. ``part_acc``/``part_ml``: the split path's fp32 partials
    ([num_seqs, num_splits, num_heads, head_dim_p] and [..., 2]); allocated like ``q`` when None.
    """
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    paged = block_tables is not None
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    head_dim_p = max(16, next_pow2(head_dim))
    shapes = dict(HEAD_DIM=head_dim, HEAD_DIM_P=head_dim_p, GROUP=group,
                  GROUP_P=max(16, next_pow2(group)),                # tl.dot needs every dim >= 16
                  BLOCK_SIZE=block_size if paged else 1, TILE=cfg.tile, IS_FP32=(q.dtype == torch.float32),
                  NUM_STAGES=cfg.num_stages, PAGED=paged)
    if paged:
        tb, tb_strides = block_tables, (block_tables.stride(0), block_tables.stride(1))
    else:                                     # contiguous: the table pointer is never read
        tb, tb_strides = seq_lens, (0, 0)
    strides = (q.stride(0), q.stride(1), q.stride(2),
               k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.stride(3),
               v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), v_cache.stride(3), *tb_strides)
    qk_scale = scale * LOG2E
    o_strides = (out.stride(0), out.stride(1), out.stride(2))
    if cfg.num_splits == 1:
        return [KernelLaunch("single_pass", (num_seqs, num_kv_heads),
                             (out, q, k_cache, v_cache, tb, seq_lens, qk_scale, *strides, *o_strides),
                             shapes, cfg.num_warps, cfg.num_stages)]
    if part_acc is None:
        part_acc = torch.empty((num_seqs, cfg.num_splits, num_heads, head_dim_p), dtype=torch.float32,
                               device=q.device)
    if part_ml is None:
        part_ml = torch.empty((num_seqs, cfg.num_splits, num_heads, 2), dtype=torch.float32, device=q.device)
    return [
        KernelLaunch("split_kv", (num_seqs, num_kv_heads, cfg.num_splits),
                     (part_acc, part_ml, q, k_cache, v_cache, tb, seq_lens, qk_scale, *strides, cfg.split_len,
                      cfg.num_splits, num_heads), shapes, cfg.num_warps, cfg.num_stages),
        KernelLaunch("reduce_splits", (num_seqs, num_heads),
                     (out, part_acc, part_ml, *o_strides, cfg.num_splits, num_heads),
                     dict(NUM_SPLITS_P=next_pow2(cfg.num_splits), HEAD_DIM=head_dim, HEAD_DIM_P=head_dim_p),
                     REDUCE_WARPS, 1),
    ]


def meta_plan(num_seqs: int, max_len: int, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
              block_size: int | None, num_splits: int | None = None, num_sms: int = 132) -> list[KernelLaunch]:
    """The launches a call of this shape makes on a GPU with ``num_sms`` SMs, on ``meta`` tensors.

    Same layout as the real inputs (:func:`page_tokens` tables padded to
    :data:`TABLE_COLUMN_MULTIPLE` columns; contiguous K/V ``[num_seqs, max_len, ...]`` when
    ``block_size`` is None), same :func:`~kernels.attention.triton_kernels.choose_config`, no memory. Used
    by :mod:`kernels.compile_check` to compile exactly what the page and ``gpu_check`` launch.
    """
    meta = "meta"
    item = torch.empty((), dtype=dtype).element_size()
    cfg = choose_config(num_seqs, num_kv_heads, max_len, head_dim, num_sms=num_sms, num_splits=num_splits,
                        itemsize=item, num_heads=num_heads)
    q = torch.empty((num_seqs, num_heads, head_dim), dtype=dtype, device=meta)
    lens = torch.empty((num_seqs,), dtype=torch.int32, device=meta)
    if block_size is None:
        kv = torch.empty((num_seqs, max_len, num_kv_heads, head_dim), dtype=dtype, device=meta)
        tables = None
    else:
        cols = round_up(max(1, cdiv(max_len, block_size)), TABLE_COLUMN_MULTIPLE)
        kv = torch.empty((num_seqs * cols + 1, block_size, num_kv_heads, head_dim), dtype=dtype, device=meta)
        tables = torch.empty((num_seqs, cols), dtype=torch.int32, device=meta)
    return launch_plan(q, kv, kv, tables, lens, cfg, torch.empty_like(q))


#: Warps of the reduction kernel (it reads [splits, head_dim] fp32 per program).
REDUCE_WARPS = 4


def _launch(q, k_cache, v_cache, block_tables, seq_lens, scale, out, *, paged: bool, num_splits, tile, num_warps,
            num_stages, config) -> torch.Tensor:
    """Launch the single pass or split-KV + reduction (paged or contiguous); inputs already valid."""
    if not HAVE_TRITON:
        raise RuntimeError("Triton is not installed; use paged_attention_torch")
    from kernels.attention import triton_kernels as tk

    head_dim = q.shape[2]
    if head_dim > MAX_HEAD_DIM:
        raise FieldError("head_dim", f" {head_dim} is above the kernel's limit of {MAX_HEAD_DIM}")
    if out is None:
        out = torch.empty_like(q)
    if q.shape[0] == 0:
        return out
    cfg = config or launch_config(q, k_cache, seq_lens, num_splits=num_splits, tile=tile,
                                  num_warps=num_warps, num_stages=num_stages)
    for launch in launch_plan(q, k_cache, v_cache, block_tables if paged else None, seq_lens, cfg, out, scale):
        getattr(tk, launch.kernel)[launch.grid](*launch.args, **launch.constexprs,
                                                num_warps=launch.num_warps, num_stages=launch.num_stages)
    return out


# --------------------------------------------------------------------------------------------
# Torch paths
# --------------------------------------------------------------------------------------------

def token_slots(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Where every token of every sequence lives, as rows of the flattened cache.

    Token ``t`` of sequence ``s`` is row ``block_tables[s, t // block_size] * block_size +
    t % block_size`` of ``k_cache.reshape(num_blocks * block_size, num_kv_heads, head_dim)``.
    Vectorised: no loop over sequences or blocks.

    Returns:
        ``(rows, valid)``: int64 and bool, both [num_seqs, max_len]; positions at or past a
        sequence's length are ``valid == False`` and point at row 0.
    """
    num_seqs = block_tables.shape[0]
    if max_len is None:
        max_len = int(seq_lens.max()) if seq_lens.numel() else 0
    t = torch.arange(max(1, max_len), device=block_tables.device)
    valid = t[None, :] < seq_lens.to(torch.int64)[:, None]
    col = (t // block_size).clamp(max=block_tables.shape[1] - 1).expand(num_seqs, -1)
    blocks = block_tables.to(torch.int64).gather(1, col)
    rows = blocks * block_size + (t % block_size)[None, :]
    return torch.where(valid, rows, torch.zeros_like(rows)), valid


def _gather_rows(src: torch.Tensor, rows: torch.Tensor, workspace: dict | None, name: str) -> torch.Tensor:
    """``src.index_select(1, rows)``, into a buffer kept in ``workspace`` when one is given."""
    if workspace is None:
        return src.index_select(1, rows)
    key = (name, src.shape[0], rows.numel(), src.shape[2], src.dtype, src.device)
    buf = workspace.get(key)
    if buf is None:
        buf = workspace[key] = torch.empty((src.shape[0], rows.numel(), src.shape[2]), dtype=src.dtype,
                                           device=src.device)
    return torch.index_select(src, 1, rows, out=buf)


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          block_tables: torch.Tensor, seq_lens: torch.Tensor,
                          scale: float | None = None, validate: bool = True,
                          workspace: dict | None = None) -> torch.Tensor:
    """The same gather and attention in torch (the "torch-cpu" backend; works on any device).

    One ``index_select`` per tensor gathers every token's K and V through the block table
    (:func:`token_slots`) into a head-major ``[num_kv_heads, num_seqs, tokens, head_dim]``
    tensor, so both attention products are plain batched matrix products with no further copy;
    grouped-query attention then runs batched over all sequences with an fp32 softmax. On a CPU
    the gather is most of the call's time. The contiguous baseline calls this same function with one block per sequence,
    so paged and contiguous differ only in where the gather reads -- in whole blocks of
    ``block_size`` rows scattered over the pool, or in one sequential run.

    Args:
        workspace: an optional dict the caller keeps between calls; the gathered K and V are
            written into buffers kept there (keyed by shape and dtype) instead of fresh memory,
            so a timing loop measures the gather and not the operating system handing out
            and clearing new pages. Both sides of a comparison pass one.

    Returns:
        [num_seqs, num_heads, head_dim] in q's dtype; a sequence with 0 tokens gives 0.

    Raises:
        FieldError: from :func:`validate_inputs` when ``validate`` is True.
    """
    if validate:
        validate_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if num_seqs == 0:
        return torch.empty_like(q)
    rows, valid = token_slots(block_tables, seq_lens, block_size)
    t = rows.shape[1]
    flat = rows.reshape(-1)
    # The gather, head-major: for each KV head, the rows of every token of every sequence.
    k, v = (_gather_rows(cache.reshape(-1, num_kv_heads, head_dim).transpose(0, 1), flat, workspace, name)
            for name, cache in (("k", k_cache), ("v", v_cache)))                         # [Hkv, S*T, D]
    k = k.reshape(num_kv_heads, num_seqs, t, head_dim).float()
    v = v.reshape(num_kv_heads, num_seqs, t, head_dim).float()
    if not bool(valid.all()):
        v = v.masked_fill(~valid[None, :, :, None], 0.0)     # unused slots may hold NaN: 0 x NaN = NaN
    qs = q.reshape(num_seqs, num_kv_heads, group, head_dim).transpose(0, 1).float()   # [Hkv, S, G, D]
    scores = torch.matmul(qs, k.transpose(-1, -2)) * scale                           # [Hkv, S, G, T]
    scores = scores.masked_fill(~valid[None, :, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)                  # an empty sequence: all 0
    out = torch.matmul(p, v).transpose(0, 1).reshape(num_seqs, num_heads, head_dim)   # [S, H, D]
    return out.to(q.dtype)


def paged_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              block_tables: torch.Tensor, seq_lens: torch.Tensor,
                              scale: float | None = None) -> torch.Tensor:
    """Reference: gather every token to a dense tensor by slot arithmetic, fp32 softmax attention.

    Deliberately simple and independent of the other paths: for each token ``t`` it computes
    block ``block_tables[s, t // block_size]`` and slot ``t % block_size``, repeats each KV head
    for its query heads, and runs ``softmax(q k^T * scale) v`` in float32.

    Returns:
        float32 tensor [num_seqs, num_heads, head_dim] (compare to the kernels' output); 0 for a
        sequence with no tokens.

    Raises:
        FieldError: from :func:`validate_inputs`.
    """
    validate_inputs(q, k_cache, v_cache, block_tables, seq_lens)
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for s in range(num_seqs):
        n_tok = int(seq_lens[s])
        if n_tok == 0:                     # attends to nothing: defined as 0
            out[s] = 0.0
            continue
        t = torch.arange(n_tok, device=q.device)
        blocks = block_tables[s].to(torch.int64)[t // block_size]
        slots = t % block_size
        k = k_cache[blocks, slots].float()                                  # [T, Hkv, D]
        v = v_cache[blocks, slots].float()
        k = k.repeat_interleave(group, dim=1)                                # [T, H, D]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[s].float(), k) * scale        # [H, T]
        p = torch.softmax(scores, dim=-1)
        out[s] = torch.einsum("ht,thd->hd", p, v)
    return out


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float | None = None,
                    backend: str | None = None, validate: bool = True,
                    num_splits: int | None = None) -> torch.Tensor:
    """Dispatch to the backend: "cuda" / "triton-interpreter" -> Triton, "torch-cpu" -> torch.

    Args:
        backend: one of :data:`kernels.attention.backend.BACKENDS`, or None for ``detect("check").name``.
        num_splits: for the Triton backends, 1 = single pass, n = split-KV, None = choose
            (ignored by the torch path, which has no launch).

    Raises:
        FieldError: unknown backend, or from :func:`validate_inputs`.
    """
    name = backend or detect("check").name
    if name not in BACKENDS:
        raise FieldError("backend", f" must be one of {BACKENDS}, got {name!r}")
    if name == "torch-cpu":
        return paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, validate)
    return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale, validate,
                                  num_splits=num_splits)


# --------------------------------------------------------------------------------------------
# Quick correctness check (the page shows it on load)
# --------------------------------------------------------------------------------------------

#: The page's quick correctness case (fp32; also compiled for sm_90 by ``kernels.compile_check``).
CHECK_CASE = {"block_size": 16, "seq_lens": (1, 70, 150), "num_heads": 8, "num_kv_heads": 2, "head_dim": 32}


def check_correctness(backend: str | None = None, block_size: int = CHECK_CASE["block_size"],
                      seq_lens: tuple[int, ...] = CHECK_CASE["seq_lens"], num_heads: int = CHECK_CASE["num_heads"],
                      num_kv_heads: int = CHECK_CASE["num_kv_heads"], head_dim: int = CHECK_CASE["head_dim"],
                      dtype: torch.dtype = torch.float32, seed: int = 0, num_splits: int | None = None) -> dict:
    """Run ``backend`` on a tiny random paged case and compare with the reference.

    Slots holding no token are NaN, so any read past a sequence's length shows up as NaN error.

    Args:
        num_splits: Triton backends only: 1 = single pass, n > 1 = the split-KV path with its
            reduction, None = the backend's own choice.

    Returns:
        dict with ``backend`` (name), ``device``, ``max_abs_error`` (float, same units as the
        attention output), ``tolerance``, ``passed`` (bool), ``seconds`` (wall time of the
        kernel call), ``path`` ("single pass", "split-KV, n splits" or "torch gather") and
        ``shape`` (dict of the case's sizes).

    Raises:
        FieldError: unknown backend or invalid shape.
    """
    import time

    chosen = detect("check")
    name = backend or chosen.name
    device = "cuda" if name == "cuda" else "cpu"
    inp = make_paged_inputs(list(seq_lens), num_heads, num_kv_heads, head_dim, block_size, dtype=dtype,
                            device=device, fill=float("nan"), spare_blocks=2, seed=seed)
    path = "torch gather"
    if name != "torch-cpu":
        cfg = launch_config(inp.q, inp.k_cache, inp.seq_lens, num_splits=num_splits)
        num_splits = cfg.num_splits
        path = "single pass" if cfg.num_splits == 1 else f"split-KV, {cfg.num_splits} splits"
    t0 = time.perf_counter()
    out = paged_attention(*inp.args, backend=name, num_splits=num_splits)
    if device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    ref = paged_attention_reference(*inp.args)
    err = float((out.float() - ref).abs().max())
    if math.isnan(err):
        err = float("inf")
    tol = 2e-3 if dtype == torch.float32 else 2e-2
    return {"backend": name, "device": chosen.device if name == chosen.name else device,
            "max_abs_error": err, "tolerance": tol, "passed": err <= tol, "seconds": secs, "path": path,
            "shape": {"seq_lens": list(seq_lens), "block_size": block_size, "num_heads": num_heads,
                      "num_kv_heads": num_kv_heads, "head_dim": head_dim, "dtype": str(dtype).replace("torch.", "")}}
