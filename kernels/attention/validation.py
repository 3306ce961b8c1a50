"""Checks of the kernels' inputs, before any launch: every problem is a FieldError naming the input.

The contract checked is the one in :mod:`kernels.attention.paged_attention`'s docstring (shapes, dtypes,
head ratio, sequence lengths, block ids); the contiguous baseline's inputs are checked as a
paged call with one block per sequence. Needs only torch (``python3 -m kernels.gpu_check``).
"""
from __future__ import annotations

import torch

from allocator.common.mathutils import cdiv
from allocator.common.errors import FieldError

#: Dtypes the kernels take (q, K and V alike).
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


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
