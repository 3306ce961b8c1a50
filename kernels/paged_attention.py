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
  (:mod:`kernels.triton_kernels` has the kernels and the launch choice).
* :func:`paged_attention_torch` -- the same gather (index the cache by block table) and
  attention in torch, for CPU timing at realistic sizes.
* :func:`paged_attention_reference` -- gathers every token to a dense tensor by explicit slot
  arithmetic and runs fp32 softmax attention; for tests and the page's check.

The contiguous baseline on the Triton backends is :func:`contiguous_attention_triton`: the same
kernels and launch with the block table compiled out (K/V ``[num_seqs, max_len, num_kv_heads,
head_dim]``, token ``t`` of sequence ``s`` at ``k[s, t]``). For the torch path,
:func:`make_contiguous` stores each sequence as one block of the maximum length, so the same
function runs on it and differs from the paged run only in where the gather reads. Sources: Kwon et al., PagedAttention (SOSP 2023); vLLM
``csrc/attention`` and ``vllm/attention/ops/paged_attn.py`` for the layout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from allocator.mathutils import cdiv, round_up
from kernels.backend import BACKENDS, detect
from kernels.errors import FieldError

from kernels.triton_kernels import HAVE_TRITON, LOG2E, LaunchConfig, choose_config, next_pow2

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Block-table rows built here are padded (with ``table_pad``) to a multiple of this many columns,
#: so the row stride is divisible by 16 for every shape: Triton then compiles one specialisation
#: per block size (it specialises integer arguments on divisibility by 16), and the offline
#: compile check covers what runs.
TABLE_COLUMN_MULTIPLE = 16
#: Largest head_dim the Triton kernels take (the tile is padded to the next power of two).
MAX_HEAD_DIM = 256


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

def validate_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor) -> None:
    """Check shapes, dtypes, head ratio, seq_lens and block ids before any launch.

    Reads ``block_tables`` and ``seq_lens`` on the host (a device sync on CUDA), so timing loops
    call the kernels with ``validate=False`` after validating once.

    Raises:
        FieldError (a ValueError) naming the field in ``.field`` -- ``q``/``k_cache``/``v_cache``/``block_tables``/``seq_lens``
            (wrong rank, shape or dtype, or tensors on different devices), ``num_heads`` (not a
            multiple of ``num_kv_heads``), ``head_dim`` (mismatch), ``dtype`` (not fp16/bf16/fp32
            or not equal across q, k_cache, v_cache), ``seq_lens`` (a value < 0, or longer than
            its block table covers) or ``block_tables`` (a used block id outside [0, num_blocks)).
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("block_tables", block_tables), ("seq_lens", seq_lens)):
        if not isinstance(t, torch.Tensor):
            raise FieldError(name, f" must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3:
        raise FieldError("q", f" must be [num_seqs, num_heads, head_dim], got shape {tuple(q.shape)}")
    if k_cache.dim() != 4:
        raise FieldError("k_cache", " must be [num_blocks, block_size, num_kv_heads, head_dim], "
                         f"got shape {tuple(k_cache.shape)}")
    if v_cache.shape != k_cache.shape:
        raise FieldError("v_cache", f" shape {tuple(v_cache.shape)} must equal k_cache shape "
                         f"{tuple(k_cache.shape)}")
    if block_tables.dim() != 2:
        raise FieldError("block_tables", " must be [num_seqs, max_blocks_per_seq], got shape "
                         f"{tuple(block_tables.shape)}")
    if seq_lens.dim() != 1:
        raise FieldError("seq_lens", f" must be [num_seqs], got shape {tuple(seq_lens.shape)}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise FieldError("dtype", f" must be float16, bfloat16 or float32, got {q.dtype}", subject="dtype of q")
    if k_cache.dtype != q.dtype:
        raise FieldError("dtype", f" ({k_cache.dtype}) must equal dtype of q ({q.dtype})", subject="dtype of k_cache")
    if v_cache.dtype != q.dtype:
        raise FieldError("dtype", f" ({v_cache.dtype}) must equal dtype of q ({q.dtype})", subject="dtype of v_cache")
    if block_tables.dtype != torch.int32:
        raise FieldError("block_tables", f" must be int32, got {block_tables.dtype}")
    if seq_lens.dtype != torch.int32:
        raise FieldError("seq_lens", f" must be int32, got {seq_lens.dtype}")
    dev = q.device
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache),
                    ("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.device != dev:
            raise FieldError(name, f" is on {t.device} but q is on {dev}")
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, kv_head_dim = k_cache.shape
    if block_tables.shape[0] != num_seqs:
        raise FieldError("block_tables", f" has {block_tables.shape[0]} rows but q has {num_seqs} sequences")
    if seq_lens.shape[0] != num_seqs:
        raise FieldError("seq_lens", f" has {seq_lens.shape[0]} entries but q has {num_seqs} sequences")
    if kv_head_dim != head_dim:
        raise FieldError("head_dim", f" of k_cache ({kv_head_dim}) must equal head_dim of q ({head_dim})")
    if head_dim < 1 or num_heads < 1 or num_kv_heads < 1 or block_size < 1:
        raise FieldError("head_dim", ", num_heads, num_kv_heads and block_size must be >= 1")
    if num_heads % num_kv_heads != 0:
        raise FieldError("num_heads", f" ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    if num_seqs == 0:
        return
    lens = seq_lens.detach().to("cpu", torch.int64)
    if int(lens.min()) < 0:
        bad = int(torch.nonzero(lens < 0)[0, 0])
        raise FieldError("seq_lens", f" = {int(lens[bad])} is negative", index=bad)
    used = cdiv(lens, block_size)                          # blocks each sequence reads
    max_blocks = block_tables.shape[1]
    if int(used.max()) > max_blocks:
        bad = int(torch.nonzero(used > max_blocks)[0, 0])
        raise FieldError("seq_lens", f" = {int(lens[bad])} needs {int(used[bad])} blocks of "
                         f"{block_size} slots but block_tables has only {max_blocks} columns", index=bad)
    table = block_tables.detach().to("cpu", torch.int64)
    cols = torch.arange(max_blocks).unsqueeze(0)
    in_use = cols < used.unsqueeze(1)
    bad_ids = in_use & ((table < 0) | (table >= num_blocks))
    if bool(bad_ids.any()):
        s, j = (int(x) for x in torch.nonzero(bad_ids)[0])
        raise FieldError("block_tables", f" = {int(table[s, j])} is out of range: the cache has blocks "
                         f"0..{num_blocks - 1}", index=s, subject=f"block_tables[{s}, {j}]")


# --------------------------------------------------------------------------------------------
# Triton
# --------------------------------------------------------------------------------------------

def _num_sms(device: torch.device) -> int | None:
    """Streaming multiprocessors of a CUDA device (None on the CPU: the interpreter)."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def launch_config(q: torch.Tensor, k_cache: torch.Tensor, seq_lens: torch.Tensor, **overrides) -> LaunchConfig:
    """The :class:`~kernels.triton_kernels.LaunchConfig` a call with these inputs would use.

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
            (:func:`kernels.triton_kernels.default_tiling`).
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


def validate_contiguous(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: torch.Tensor) -> None:
    """Check the contiguous baseline's inputs: ``k``/``v`` [num_seqs, max_len, num_kv_heads, head_dim].

    Raises:
        FieldError: naming the field, as :func:`validate_inputs` does; ``seq_lens`` above ``max_len``.
    """
    if not isinstance(k, torch.Tensor) or k.dim() != 4:
        raise FieldError("k", " must be [num_seqs, max_len, num_kv_heads, head_dim], got "
                         f"{tuple(k.shape) if isinstance(k, torch.Tensor) else type(k).__name__}")
    n, max_len = k.shape[0], k.shape[1]
    if isinstance(seq_lens, torch.Tensor) and seq_lens.dim() == 1 and seq_lens.numel():
        lens = seq_lens.detach().to("cpu", torch.int64)
        if int(lens.max()) > max_len:
            bad = int(torch.nonzero(lens > max_len)[0, 0])
            raise FieldError("seq_lens", f" = {int(lens[bad])} is longer than k holds ({max_len} tokens)", index=bad)
    tables = torch.arange(n, dtype=torch.int32, device=k.device).reshape(n, 1)
    # One block of max_len slots per sequence: the paged contract with an identity table says the
    # same thing about shapes, dtypes, heads and lengths.
    validate_inputs(q, k, v, tables, seq_lens)


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
    ``block_size`` is None), same :func:`~kernels.triton_kernels.choose_config`, no memory. Used
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
    from kernels import triton_kernels as tk

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
        backend: one of :data:`kernels.backend.BACKENDS`, or None for ``detect("check").name``.
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
# Inputs: paged caches from dense tokens, and the contiguous baseline
# --------------------------------------------------------------------------------------------

@dataclass
class PagedInputs:
    """Tensors for one decode step (shapes in the module docstring), plus the dense tokens.

    ``k_dense``/``v_dense`` [num_seqs, max_len, num_kv_heads, head_dim] hold the same tokens the
    paged cache holds, so the contiguous baseline and the check see identical data.
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    k_dense: torch.Tensor
    v_dense: torch.Tensor

    @property
    def args(self) -> tuple[torch.Tensor, ...]:
        """``(q, k_cache, v_cache, block_tables, seq_lens)`` for the kernels."""
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V a decode step must read: 2 x sum(seq_lens) x num_kv_heads x head_dim x itemsize."""
        _, _, h, d = self.k_dense.shape
        return 2 * int(self.seq_lens.sum()) * h * d * self.k_dense.element_size()


def page_tokens(k_dense: torch.Tensor, v_dense: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                fill: float = 0.0, spare_blocks: int = 0, generator: torch.Generator | None = None,
                table_pad: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scatter dense tokens into a paged cache with randomly permuted block tables.

    Args:
        k_dense, v_dense: [num_seqs, max_len, num_kv_heads, head_dim].
        seq_lens: int32 [num_seqs]; only the first ``seq_lens[s]`` tokens of row ``s`` are kept.
        block_size: slots per block (>= 1).
        fill: value for every slot holding no token (NaN in tests: any read past seq_len shows).
        spare_blocks: extra unused blocks in the pool (also filled with ``fill``).
        generator: torch RNG for the block permutation (CPU).
        table_pad: value of block-table entries past each sequence's last block.

    Returns:
        ``(k_cache, v_cache, block_tables)`` with k/v_cache
        [num_blocks, block_size, num_kv_heads, head_dim] and block_tables int32
        [num_seqs, ceil(max_len / block_size) rounded up to a multiple of
        :data:`TABLE_COLUMN_MULTIPLE`], on k_dense's device.

    Raises:
        FieldError: ``block_size`` < 1.
    """
    if block_size < 1:
        raise FieldError("block_size", f" must be >= 1, got {block_size}")
    num_seqs, max_len, h, d = k_dense.shape
    dev = k_dense.device
    lens = [int(x) for x in seq_lens.tolist()]
    per_seq = [cdiv(n, block_size) for n in lens]
    num_used = sum(per_seq)
    num_blocks = num_used + spare_blocks
    perm = torch.randperm(num_blocks, generator=generator).to(dev)
    max_blocks = round_up(max(1, cdiv(max_len, block_size)), TABLE_COLUMN_MULTIPLE)
    tables = torch.full((num_seqs, max_blocks), table_pad, dtype=torch.int32, device=dev)
    k_cache = torch.full((num_blocks, block_size, h, d), fill, dtype=k_dense.dtype, device=dev)
    v_cache = torch.full_like(k_cache, fill)
    nxt = 0
    for s, (n, nb) in enumerate(zip(lens, per_seq)):
        if nb == 0:
            continue
        ids = perm[nxt:nxt + nb]
        nxt += nb
        tables[s, :nb] = ids.to(torch.int32)
        full = n // block_size                     # completely filled blocks
        if full:
            k_cache[ids[:full]] = k_dense[s, :full * block_size].reshape(full, block_size, h, d)
            v_cache[ids[:full]] = v_dense[s, :full * block_size].reshape(full, block_size, h, d)
        rest = n - full * block_size
        if rest:
            k_cache[ids[full], :rest] = k_dense[s, full * block_size:n]
            v_cache[ids[full], :rest] = v_dense[s, full * block_size:n]
    return k_cache, v_cache, tables


def make_paged_inputs(seq_lens: list[int], num_heads: int, num_kv_heads: int, head_dim: int,
                      block_size: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                      fill: float = 0.0, spare_blocks: int = 0, seed: int = 0,
                      max_len: int | None = None) -> PagedInputs:
    """Random q and tokens, paged into a randomly permuted block pool.

    Args:
        seq_lens: tokens per sequence (each >= 0, at least one > 0; a 0 has no blocks).
        num_heads, num_kv_heads, head_dim: attention shape (num_heads a multiple of num_kv_heads).
        block_size: slots per block.
        dtype: torch.float16 or torch.float32.
        device: where the tensors live.
        fill: value in slots that hold no token (NaN in tests).
        spare_blocks: unused blocks added to the pool.
        seed: RNG seed (values ~ N(0, 1), generated on the CPU for reproducibility).
        max_len: columns of the dense tensors (default max(seq_lens)).

    Returns:
        :class:`PagedInputs`.

    Raises:
        FieldError: ``seq_lens`` empty, negative or all 0, ``block_size`` < 1.
    """
    if not seq_lens or min(seq_lens) < 0 or max(seq_lens) < 1:
        raise FieldError("seq_lens", f" must be a non-empty list of values >= 0, not all 0, got {seq_lens}")
    gen = torch.Generator().manual_seed(seed)
    n = len(seq_lens)
    max_len = max_len or max(seq_lens)
    q = torch.randn(n, num_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    k_dense = torch.randn(n, max_len, num_kv_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    v_dense = torch.randn(n, max_len, num_kv_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    k_cache, v_cache, tables = page_tokens(k_dense, v_dense, lens, block_size, fill=fill,
                                           spare_blocks=spare_blocks, generator=gen)
    return PagedInputs(q, k_cache, v_cache, tables, lens, k_dense, v_dense)


def make_contiguous(inputs: PagedInputs) -> tuple[torch.Tensor, ...]:
    """The contiguous baseline for the same tokens: each sequence is one block of ``max_len``.

    Returns:
        ``(q, k_cache, v_cache, block_tables, seq_lens)`` with k/v_cache
        ``[num_seqs, max_len, num_kv_heads, head_dim]`` (the dense tensors themselves, no copy)
        and block_tables ``[[0], [1], ...]`` int32 -- ready for the same kernel.
    """
    n = inputs.k_dense.shape[0]
    tables = torch.arange(n, dtype=torch.int32, device=inputs.q.device).reshape(n, 1)
    return inputs.q, inputs.k_dense, inputs.v_dense, tables, inputs.seq_lens


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
